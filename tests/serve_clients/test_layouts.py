"""The server under mpirun (tp 2 or pp 2, sdk_suite.py --layout) through the openai SDK:
greedy chat and completions equal one-process `olmo2 generate` on the same text
(docs/architecture.md §8: greedy answers do not depend on the layout)."""
from harness import SdkCase
from olmo2_chat import CONVERSATIONS, render

N = 12


class Layout(SdkCase):
    def test_greedy_chat_equals_olmo2_generate(self):
        for messages in CONVERSATIONS:
            with self.subTest(turns=len(messages)):
                ref = self.refs.generate(N, text=render(messages))
                r = self.chat(messages=messages, max_tokens=N, temperature=0)
                self.assertEqual(r.choices[0].message.content, ref["text"])
                self.assertEqual(r.usage.prompt_tokens, len(ref["prompt_ids"]))

    def test_streamed_chat_equals_olmo2_generate(self):
        messages = CONVERSATIONS[1]
        ref = self.refs.generate(N, text=render(messages))
        chunks = self.chat(messages=messages, max_tokens=N, temperature=0, stream=True)
        self.assertEqual("".join(c.choices[0].delta.content or "" for c in chunks if c.choices), ref["text"])

    def test_greedy_completions_batch_equals_olmo2_generate(self):
        prompts = ["The river", "In 1848 the", "def main():"]
        refs = [self.refs.generate(N, text=p)["text"] for p in prompts]
        self.assertEqual([self.greedy(p, N) for p in prompts], refs)
        r = self.complete(prompt=prompts, max_tokens=N, temperature=0)
        self.assertEqual([c.text for c in r.choices], refs)
