"""/v1/completions through the openai SDK: greedy answers equal `olmo2 generate`, streams
equal whole answers, batches of prompts, n and best_of, echo with prompt logprobs (the
request lm-evaluation-harness sends)."""
import math

from harness import SdkCase

PROMPT = "The river"
N = 16  # tokens a test generates unless it says otherwise


class Completions(SdkCase):
    def test_greedy_equals_olmo2_generate(self):
        ref = self.refs.generate(N, text=PROMPT)
        r = self.complete(prompt=PROMPT, max_tokens=N, temperature=0)
        self.assertEqual(r.object, "text_completion")
        self.assertEqual(len(r.choices), 1)
        self.assertEqual(r.choices[0].text, ref["text"])
        self.assertEqual(r.choices[0].finish_reason, ref["finish_reason"])
        self.assertEqual(r.usage.prompt_tokens, len(ref["prompt_ids"]))
        self.assertEqual(r.usage.completion_tokens, len(ref["output_ids"]))
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens)
        # A list of ids is the same prompt.
        ids = self.refs.tokenize(PROMPT)
        self.assertEqual(self.greedy(ids, N), ref["text"])

    def test_stream_equals_whole_answer(self):
        whole = self.greedy(PROMPT, N)
        chunks = list(self.complete(prompt=PROMPT, max_tokens=N, temperature=0, stream=True))
        self.assertGreater(len(chunks), 1)
        self.assertEqual("".join(c.choices[0].text for c in chunks if c.choices), whole)
        self.assertEqual(len({c.id for c in chunks}), 1, "every chunk of a stream carries the response's id")
        finished = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        self.assertEqual(finished, ["length"])

    def test_batch_of_strings_one_choice_per_prompt_in_order(self):
        prompts = ["The river", "In 1848 the", "def main():"]
        singles = [self.complete(prompt=p, max_tokens=8, temperature=0) for p in prompts]
        r = self.complete(prompt=prompts, max_tokens=8, temperature=0)
        self.assertEqual([c.index for c in r.choices], [0, 1, 2])
        self.assertEqual([c.text for c in r.choices], [s.choices[0].text for s in singles])
        for field in ("prompt_tokens", "completion_tokens", "total_tokens"):
            self.assertEqual(getattr(r.usage, field), sum(getattr(s.usage, field) for s in singles), field)

    def test_batch_of_token_id_lists(self):
        prompts = [self.refs.tokenize(p) for p in ("Zwei Männer", "x = 3;")]
        singles = [self.complete(prompt=ids, max_tokens=8, temperature=0) for ids in prompts]
        r = self.complete(prompt=prompts, max_tokens=8, temperature=0)
        self.assertEqual([c.index for c in r.choices], [0, 1])
        self.assertEqual([c.text for c in r.choices], [s.choices[0].text for s in singles])
        self.assertEqual(r.usage.prompt_tokens, sum(len(p) for p in prompts))
        self.assertEqual(r.usage.completion_tokens, sum(s.usage.completion_tokens for s in singles))

    def test_batch_streamed_by_index(self):
        prompts = ["The river", "Once upon"]
        singles = [self.greedy(p, 8) for p in prompts]
        texts = ["", ""]
        for chunk in self.complete(prompt=prompts, max_tokens=8, temperature=0, stream=True):
            for c in chunk.choices:
                texts[c.index] += c.text
        self.assertEqual(texts, singles)

    def test_n_gives_distinct_sampled_choices(self):
        kw = dict(prompt=PROMPT, max_tokens=8, temperature=1, seed=1234, extra_body={"ignore_eos": True})
        r = self.complete(n=3, **kw)
        self.assertEqual([c.index for c in r.choices], [0, 1, 2])
        texts = [c.text for c in r.choices]
        self.assertEqual(len(set(texts)), 3, texts)
        # Choice 0 samples with the request's seed itself: n = 1 gives the same text.
        self.assertEqual(self.complete(**kw).choices[0].text, texts[0])
        self.assertEqual(r.usage.prompt_tokens, len(self.refs.tokenize(PROMPT)), "the prompt counts once")
        self.assertEqual(r.usage.completion_tokens, 24)

    def test_best_of_returns_the_highest_cumulative_logprob(self):
        kw = dict(prompt=PROMPT, max_tokens=8, temperature=1, seed=99, logprobs=0, extra_body={"ignore_eos": True})
        candidates = self.complete(n=3, **kw).choices
        sums = [sum(c.logprobs.token_logprobs) for c in candidates]
        best = candidates[max(range(3), key=lambda i: sums[i])]
        r = self.complete(n=1, best_of=3, **kw)
        self.assertEqual(len(r.choices), 1)
        self.assertEqual(r.choices[0].text, best.text, f"cumulative logprobs of the 3 candidates: {sums}")

    def test_echo_max_tokens_0_scores_the_prompt(self):
        # lm-evaluation-harness's loglikelihood request: token ids, echo, logprobs, temperature 0.
        ids = self.refs.tokenize("The quick brown fox jumps over the lazy dog")
        r = self.complete(prompt=[ids], max_tokens=0, echo=True, logprobs=1, temperature=0)
        c = r.choices[0]
        lp = c.logprobs
        self.assertEqual(len(lp.tokens), len(ids))
        self.assertEqual(len(lp.token_logprobs), len(ids))
        self.assertIsNone(lp.token_logprobs[0], "the first prompt token has no logprob")
        for x in lp.token_logprobs[1:]:
            self.assertTrue(math.isfinite(x) and x <= 0, lp.token_logprobs)
        self.assertEqual(c.text, "The quick brown fox jumps over the lazy dog")
        self.assertEqual(r.usage.prompt_tokens, len(ids))
        self.assertEqual(r.usage.completion_tokens, 0)

    def test_echo_prompt_logprobs_equal_generated_logprobs(self):
        # Score prompt + greedy continuation: the continuation's positions must get the
        # log-probabilities decoding gave those tokens, and each is its position's top-1.
        ids = self.refs.tokenize(PROMPT)
        gen = self.complete(prompt=ids, max_tokens=8, temperature=0, logprobs=1,
                            extra_body={"ignore_eos": True}).choices[0].logprobs
        out = self.refs.generate(8, ids=ids)["output_ids"]
        scored = self.complete(prompt=ids + out, max_tokens=0, echo=True, logprobs=1).choices[0].logprobs
        self.assertEqual(scored.tokens[len(ids):], gen.tokens)
        for i, (a, b) in enumerate(zip(scored.token_logprobs[len(ids):], gen.token_logprobs)):
            self.assertAlmostEqual(a, b, delta=1e-4, msg=f"continuation token {i}")
            top = scored.top_logprobs[len(ids) + i]
            self.assertEqual(len(top), 1)
            self.assertAlmostEqual(max(top.values()), a, delta=1e-6, msg=f"greedy token {i} is its top-1")

    def test_echo_with_generation_lm_eval_shape(self):
        # lm-evaluation-harness's local-completions sends max_tokens 1 with echo: the
        # tokens are the prompt's and then the generated one.
        prompts = [self.refs.tokenize("A cat sat"), self.refs.tokenize("Rain falls on")]
        r = self.complete(prompt=prompts, max_tokens=1, echo=True, logprobs=1, temperature=0, seed=1234)
        self.assertEqual(len(r.choices), 2)
        for c, ids, text in zip(r.choices, prompts, ("A cat sat", "Rain falls on")):
            self.assertEqual(len(c.logprobs.tokens), len(ids) + 1)
            self.assertIsNone(c.logprobs.token_logprobs[0])
            self.assertEqual(c.text, text + self.greedy(ids, 1))

    def test_seeded_sampling_is_reproducible(self):
        kw = dict(prompt=PROMPT, max_tokens=N, temperature=0.8, top_p=0.95, seed=7)
        self.assertEqual(self.complete(**kw).choices[0].text, self.complete(**kw).choices[0].text)
