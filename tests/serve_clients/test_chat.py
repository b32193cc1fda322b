"""/v1/chat/completions through the openai SDK: the prompt is OLMo 2 Instruct's chat
template rendered as transformers does (olmo2_chat.render, written out by hand), so
greedy chat equals `olmo2 generate` on that text; streams, usage, logprobs, n."""
import json
import os

from harness import REPO, SdkCase
from olmo2_chat import CONVERSATIONS, render

N = 12


class Chat(SdkCase):
    def test_render_equals_transformers(self):
        # The expected prompts themselves, against transformers' apply_chat_template on the
        # published template (tests/serve/fixtures/chat_templates.json, its OLMo 2 cases
        # with string contents).
        with open(os.path.join(REPO, "tests", "serve", "fixtures", "chat_templates.json"), encoding="utf-8") as f:
            cases = [c for c in json.load(f)["cases"] if c["template"] == "olmo2" and "expected" in c
                     and all(isinstance(m.get("content"), str) for m in c["messages"])]
        self.assertGreaterEqual(len(cases), 8)
        for c in cases:
            with self.subTest(c["name"]):
                self.assertEqual(render(c["messages"], c["add_generation_prompt"]), c["expected"])

    def test_greedy_chat_equals_olmo2_generate_on_the_rendered_prompt(self):
        for messages in CONVERSATIONS:
            with self.subTest(turns=len(messages)):
                ref = self.refs.generate(N, text=render(messages))
                r = self.chat(messages=messages, max_tokens=N, temperature=0)
                self.assertEqual(r.object, "chat.completion")
                self.assertEqual(len(r.choices), 1)
                m = r.choices[0].message
                self.assertEqual((m.role, m.content), ("assistant", ref["text"]))
                self.assertEqual(r.choices[0].finish_reason, ref["finish_reason"])
                self.assertEqual(r.usage.prompt_tokens, len(ref["prompt_ids"]))
                self.assertEqual(r.usage.completion_tokens, len(ref["output_ids"]))

    def test_chat_stream_equals_whole_answer(self):
        messages = CONVERSATIONS[1]
        whole = self.chat(messages=messages, max_tokens=N, temperature=0).choices[0].message.content
        chunks = list(self.chat(messages=messages, max_tokens=N, temperature=0, stream=True))
        self.assertTrue(all(c.object == "chat.completion.chunk" for c in chunks))
        self.assertEqual(len({c.id for c in chunks}), 1)
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        self.assertEqual("".join(c.choices[0].delta.content or "" for c in chunks if c.choices), whole)
        self.assertEqual([c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason],
                         ["length"])

    def test_chat_stream_include_usage(self):
        messages = CONVERSATIONS[0]
        prompt_tokens = len(self.refs.generate(N, text=render(messages))["prompt_ids"])
        chunks = list(self.chat(messages=messages, max_tokens=5, temperature=0, stream=True,
                                stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
        self.assertEqual(chunks[-1].choices, [])
        u = chunks[-1].usage
        self.assertEqual((u.prompt_tokens, u.completion_tokens, u.total_tokens), (prompt_tokens, 5, prompt_tokens + 5))

    def test_chat_logprobs(self):
        r = self.chat(messages=CONVERSATIONS[0], max_tokens=6, temperature=0, logprobs=True, top_logprobs=3,
                      extra_body={"ignore_eos": True})
        content = r.choices[0].logprobs.content
        self.assertEqual(len(content), 6)
        for i, e in enumerate(content):
            self.assertEqual(len(e.top_logprobs), 3, f"token {i}")
            self.assertAlmostEqual(e.top_logprobs[0].logprob, e.logprob, delta=1e-6, msg=f"token {i} is greedy's")
            self.assertEqual(e.top_logprobs[0].token, e.token)
            self.assertLessEqual(e.logprob, 0)

    def test_chat_n_gives_distinct_sampled_choices(self):
        r = self.chat(messages=CONVERSATIONS[0], max_tokens=8, temperature=1, seed=5, n=2,
                      extra_body={"ignore_eos": True})
        self.assertEqual([c.index for c in r.choices], [0, 1])
        self.assertNotEqual(r.choices[0].message.content, r.choices[1].message.content)
        self.assertEqual(r.usage.completion_tokens, 16)
