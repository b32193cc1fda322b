"""Each request field that changes generation, through the openai SDK (vLLM's fields in
extra_body), asserted by what its definition makes of a greedy answer of known tokens:
logit_bias, min_tokens, stop_token_ids, the presence/frequency/repetition penalties
(vLLM's definitions), min_p, include_stop_str_in_output, skip_special_tokens,
return_tokens_as_token_ids, top_logprobs that keep every alternative, and
stream_options.include_usage."""
from harness import SdkCase
from olmo2_chat import EOS_ID

PROMPT = "The river"
N = 32


class SamplingFields(SdkCase):
    def setUp(self):
        ref = self.refs.generate(N, text=PROMPT)
        self.ids = ref["output_ids"]  # greedy decoding's tokens
        self.prompt_ids = ref["prompt_ids"]

    def greedy_logprobs(self, max_tokens, top=2):
        return self.complete(prompt=PROMPT, max_tokens=max_tokens, temperature=0, logprobs=top).choices[0].logprobs

    def first_repeat(self, seen=()):
        """The first position whose greedy token is in `seen` or was generated before."""
        seen = set(seen)
        for i, t in enumerate(self.ids):
            if t in seen:
                return i
            seen.add(t)
        self.fail(f"greedy decoding of {PROMPT!r} repeats no token in {N}: {self.ids}")

    def test_logit_bias_minus_100_removes_the_greedy_token(self):
        lp = self.greedy_logprobs(1)
        runner_up = sorted(lp.top_logprobs[0].items(), key=lambda kv: -kv[1])[1][0]
        r = self.complete(prompt=PROMPT, max_tokens=4, temperature=0, logprobs=0,
                          logit_bias={str(self.ids[0]): -100}).choices[0]
        self.assertEqual(r.logprobs.tokens[0], runner_up, "without the greedy token the runner-up is chosen")
        self.assertNotEqual(r.text, self.greedy(PROMPT, 4))

    def test_logit_bias_plus_100_forces_a_token(self):
        the = self.refs.tokenize(" the")
        self.assertEqual(len(the), 1)
        r = self.complete(prompt=PROMPT, max_tokens=5, temperature=0, logit_bias={str(the[0]): 100})
        self.assertEqual(r.choices[0].text, " the" * 5)

    def test_min_tokens_defers_eos(self):
        eos = {str(EOS_ID): 100}  # EOS becomes certain
        r = self.complete(prompt=PROMPT, max_tokens=16, temperature=0, logit_bias=eos).choices[0]
        self.assertEqual((r.text, r.finish_reason), ("", "stop"), "EOS at once without min_tokens")
        r = self.complete(prompt=PROMPT, max_tokens=16, temperature=0, logit_bias=eos, extra_body={"min_tokens": 5})
        c = r.choices[0]
        self.assertEqual(c.finish_reason, "stop")
        self.assertGreaterEqual(r.usage.completion_tokens, 5)
        # EOS banned, the other logits untouched: the first 5 tokens are greedy's.
        self.assertEqual(c.text, self.greedy(PROMPT, 5))

    def test_stop_token_ids_stop_at_a_greedy_token(self):
        k = next(i for i in range(2, N) if self.ids[i] not in self.ids[:i])
        r = self.complete(prompt=PROMPT, max_tokens=N, temperature=0, extra_body={"stop_token_ids": [self.ids[k]]})
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertEqual(r.choices[0].text, self.greedy(PROMPT, k), f"stop at token {k} ({self.ids[k]})")
        self.assertIn(r.usage.completion_tokens, (k, k + 1))

    def check_penalty(self, extra, seen, exact_change):
        """Penalties only lower tokens already seen: the answer equals greedy's up to the
        first greedy token in `seen` ∪ earlier output, and differs after it (exactly
        there when `exact_change`: the penalty exceeds the logprob gap to the runner-up)."""
        r = self.first_repeat(seen)
        greedy = self.complete(prompt=PROMPT, max_tokens=N, temperature=0, logprobs=2,
                               extra_body={"ignore_eos": True}).choices[0].logprobs
        got = self.complete(prompt=PROMPT, max_tokens=N, temperature=0, logprobs=0,
                            extra_body=dict(extra, ignore_eos=True)).choices[0].logprobs.tokens
        self.assertEqual(got[:r], greedy.tokens[:r], f"before the first repeat (token {r})")
        self.assertNotEqual(got, greedy.tokens)
        if exact_change:
            top = sorted(greedy.top_logprobs[r].values(), reverse=True)
            self.assertLess(top[0] - top[1], exact_change)
            self.assertNotEqual(got[r], greedy.tokens[r], f"the repeat at token {r} is penalised away")

    def test_presence_penalty(self):
        self.check_penalty({"presence_penalty": 2.0}, (), 2.0)

    def test_frequency_penalty(self):
        self.check_penalty({"frequency_penalty": 2.0}, (), 2.0)

    def test_repetition_penalty(self):
        # vLLM's repetition penalty covers the prompt's tokens too.
        self.check_penalty({"repetition_penalty": 3.0}, self.prompt_ids, 0)

    def test_min_p_near_1_is_greedy(self):
        greedy = self.greedy(PROMPT, 16)
        plain = [self.complete(prompt=PROMPT, max_tokens=16, temperature=1, seed=s).choices[0].text for s in (1, 2, 3)]
        self.assertNotIn(greedy, plain, "sampling at temperature 1 is not greedy here")
        for s in (1, 2, 3):
            r = self.complete(prompt=PROMPT, max_tokens=16, temperature=1, seed=s, extra_body={"min_p": 0.999})
            self.assertEqual(r.choices[0].text, greedy, f"seed {s}")

    def test_include_stop_str_in_output(self):
        c = self.complete(prompt=PROMPT, max_tokens=16, temperature=0, logprobs=0).choices[0]
        text, lp = c.text, c.logprobs
        stop = lp.tokens[5]
        at = text.find(stop)
        self.assertEqual(at, lp.text_offset[5], f"{stop!r} first occurs at token 5")
        r = self.complete(prompt=PROMPT, max_tokens=16, temperature=0, stop=[stop]).choices[0]
        self.assertEqual((r.text, r.finish_reason), (text[:at], "stop"))
        r = self.complete(prompt=PROMPT, max_tokens=16, temperature=0, stop=[stop],
                          extra_body={"include_stop_str_in_output": True}).choices[0]
        self.assertEqual((r.text, r.finish_reason), (text[:at + len(stop)], "stop"))

    def test_skip_special_tokens(self):
        im_start = 100264  # <|im_start|>, a special token of the dolma2 tokenizer
        kw = dict(prompt=PROMPT, max_tokens=3, temperature=0, logit_bias={str(im_start): 100})
        r = self.complete(**kw)
        self.assertEqual((r.choices[0].text, r.usage.completion_tokens), ("", 3), "skipped by default")
        r = self.complete(**kw, extra_body={"skip_special_tokens": False})
        self.assertEqual(r.choices[0].text, "<|im_start|>" * 3)

    def test_return_tokens_as_token_ids(self):
        r = self.complete(prompt=PROMPT, max_tokens=8, temperature=0, logprobs=2,
                          extra_body={"return_tokens_as_token_ids": True}).choices[0].logprobs
        self.assertEqual(r.tokens, [f"token_id:{i}" for i in self.ids[:8]])
        for i, top in enumerate(r.top_logprobs):
            self.assertEqual(len(top), 2)
            self.assertIn(f"token_id:{self.ids[i]}", top)

    def test_top_logprobs_keep_every_alternative(self):
        # Greedy on this prompt has, at token 12, alternatives among the top 20 whose texts
        # are the same: padding rows of the vocabulary (no text; the random model gives
        # them logits). Each must still be an entry of its own: 20 per token.
        kw = dict(prompt="Zwei Männer", max_tokens=16, temperature=0, logprobs=20, extra_body={"ignore_eos": True})
        by_id = self.complete(**dict(kw, extra_body={"ignore_eos": True, "return_tokens_as_token_ids": True}))
        tops = by_id.choices[0].logprobs.top_logprobs
        if all(k.startswith("token_id:") for k in tops[12]):  # the precondition, where ids are reported
            texts = [self.refs.token_text(int(k[len("token_id:"):])) for k in tops[12]]
            self.assertLess(len(set(texts)), len(texts), f"token 12's alternatives have distinct texts: {texts}")
        r = self.complete(**kw).choices[0].logprobs
        self.assertEqual([len(top) for top in r.top_logprobs], [20] * 16)

    def test_stream_include_usage(self):
        chunks = list(self.complete(prompt=PROMPT, max_tokens=6, temperature=0, stream=True,
                                    stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
        last = chunks[-1]
        self.assertEqual(last.choices, [], "the usage chunk has no choices")
        self.assertEqual((last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens),
                         (len(self.prompt_ids), 6, len(self.prompt_ids) + 6))
        for c in chunks[:-1]:
            self.assertTrue(c.choices, "only the last chunk has no choices")
            self.assertIsNone(c.usage, "usage comes only in the last chunk")
        self.assertEqual("".join(c.choices[0].text for c in chunks[:-1]), self.greedy(PROMPT, 6))
