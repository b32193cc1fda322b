"""Speculative decoding over HTTP (docs/architecture.md §8): the suite's plain server and
two more on the same model and in the same layout (one process, tp 2 or pp 2) — prompt lookup (--speculative-ngram 2) and a draft model that
is the model itself (--speculative-model, a draft that always agrees under greedy) —
answer the same requests with the same choices: text, every token's logprob and
alternatives, finish_reason; greedy and seeded, streamed (the openai SDK) and not, with a
stop string and n = 2. The speculative servers' usage carries "speculative" and their
/metrics count drafted tokens; the plain server's do neither."""
import json
import os
import re
import urllib.request

from harness import MODEL_NAME, SdkCase, Server, tail

import harness

K = 4
SPECULATIVE = {
    "ngram": ["--speculative-ngram", "2", "--num-speculative-tokens", str(K)],
    "draft": ["--num-speculative-tokens", str(K)],  # --speculative-model added with the model's path
}
# The suite's random model continues the first prompt greedily with a run of one token,
# then loops on a few others: prompt lookup proposes there, rightly and wrongly.
PROMPTS = ["a a a a a a a a", "The cat sat on the mat. The cat sat on the"]


def post(server, path, body):
    request = urllib.request.Request(f"{server.base}{path}", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Bearer {server.key}"})
    with urllib.request.urlopen(request, timeout=harness.REQUEST_TIMEOUT) as r:
        return json.loads(r.read())


def log_of(server):
    with open(server.log, encoding="utf-8", errors="replace") as f:
        return f.read()


def spec_counters(server):
    """(proposed, accepted) from the server's /metrics."""
    with urllib.request.urlopen(f"{server.base}/metrics", timeout=harness.REQUEST_TIMEOUT) as r:
        text = r.read().decode()
    value = {}
    for name in ("proposed", "accepted"):
        m = re.search(rf"^olmo2_serve_spec_{name}_tokens_total(?:{{}})? (\S+)$", text, re.M)
        assert m, f"/metrics has no olmo2_serve_spec_{name}_tokens_total"
        value[name] = float(m.group(1))
    return value["proposed"], value["accepted"]


class Speculative(SdkCase):
    servers = {}

    @classmethod
    def setUpClass(cls):
        ctx = harness.RUNNING
        for name, extra in SPECULATIVE.items():
            if name == "draft":
                extra = ["--speculative-model", ctx.model] + extra
            tmp = os.path.join(ctx.tmp_dir.name, name)
            os.makedirs(tmp)
            cls.servers[name] = Server(ctx.args, ctx.model, tmp, extra)

    @classmethod
    def tearDownClass(cls):
        for name, server in cls.servers.items():
            status = server.stop()
            assert status == 0, f"the {name} server exited with status {status}:\n{tail(server.log)}"

    def same_answers(self, path, body):
        """Posts `body` to every server; asserts the choices equal the plain server's and
        returns {name: usage}."""
        plain = post(self.ctx.server, path, body)
        self.assertNotIn("speculative", plain["usage"])
        usage = {}
        for name, server in self.servers.items():
            with self.subTest(server=name, body=body):
                answer = post(server, path, body)
                self.assertEqual(answer["choices"], plain["choices"])
                spec = dict(answer["usage"])
                extra = spec.pop("speculative", None)
                self.assertEqual(spec, plain["usage"])
                usage[name] = extra
        return plain, usage

    def test_greedy_and_seeded_completions_with_logprobs(self):
        body = {"model": MODEL_NAME, "prompt": PROMPTS, "max_tokens": 40, "temperature": 0, "logprobs": 3}
        _, usage = self.same_answers("/v1/completions", body)
        draft = usage["draft"]  # the model as its own draft: every greedy proposal is accepted
        self.assertGreater(draft["proposed_tokens"], 0)
        self.assertEqual(draft["accepted_tokens"], draft["proposed_tokens"])
        self.assertEqual(draft["acceptance_rate"], 1.0)
        ngram = usage["ngram"]
        self.assertGreater(ngram["proposed_tokens"], 0)
        self.assertEqual(ngram["acceptance_rate"], ngram["accepted_tokens"] / ngram["proposed_tokens"])
        self.same_answers("/v1/completions", dict(body, max_tokens=16, n=2, temperature=0.9, top_p=0.95, seed=7,
                                                  logprobs=2))

    def test_a_stop_string_ends_every_server_at_the_same_place(self):
        body = {"model": MODEL_NAME, "prompt": PROMPTS[0], "max_tokens": 32, "temperature": 0}
        text = post(self.ctx.server, "/v1/completions", body)["choices"][0]["text"]
        self.assertGreater(len(text), 8)
        stop = text[len(text) // 2:len(text) // 2 + 2]  # hit mid-way, perhaps inside an accepted draft
        plain, _ = self.same_answers("/v1/completions", dict(body, stop=[stop], logprobs=1))
        self.assertEqual(plain["choices"][0]["finish_reason"], "stop")
        self.same_answers("/v1/completions", dict(body, stop=[stop], n=2, temperature=0.7, seed=3))

    def test_chat_with_top_logprobs_and_n_2(self):
        messages = [{"role": "user", "content": PROMPTS[1]}]
        for sampling in ({"temperature": 0}, {"temperature": 0.8, "seed": 11, "n": 2}):
            self.same_answers("/v1/chat/completions", {"model": MODEL_NAME, "messages": messages, "max_tokens": 12,
                                                       "logprobs": True, "top_logprobs": 2, **sampling})

    def streamed(self, client, **kw):
        """A streamed completion through the SDK: {index: (text, token_logprobs, tokens,
        finish_reason)} and the usage event's extra fields."""
        out, usage = {}, None
        for chunk in client.completions.create(model=MODEL_NAME, stream=True,
                                               stream_options={"include_usage": True}, **kw):
            if chunk.usage is not None:
                usage = chunk.usage.model_extra or {}
            for c in chunk.choices:
                text, logprobs, tokens, finish = out.get(c.index, ("", [], [], None))
                if c.logprobs is not None:
                    logprobs, tokens = logprobs + c.logprobs.token_logprobs, tokens + c.logprobs.tokens
                out[c.index] = (text + c.text, logprobs, tokens, c.finish_reason or finish)
        return out, usage

    def test_streamed_through_the_sdk(self):
        import openai
        greedy = {"prompt": PROMPTS[0], "max_tokens": 24, "temperature": 0, "logprobs": 2}
        seeded = {"prompt": PROMPTS[1], "max_tokens": 12, "n": 2, "temperature": 0.8, "seed": 5, "logprobs": 2}
        for kw in (greedy, seeded):
            plain, plain_usage = self.streamed(self.client, **kw)
            self.assertEqual(plain_usage, {})
            self.assertEqual(sorted(plain), list(range(kw.get("n", 1))))
            for name, server in self.servers.items():
                with self.subTest(server=name, seeded=kw is seeded):
                    client = openai.OpenAI(base_url=f"{server.base}/v1", api_key=server.key, max_retries=0,
                                           timeout=harness.REQUEST_TIMEOUT)
                    answer, usage = self.streamed(client, **kw)
                    self.assertEqual(answer, plain)
                    if kw is greedy or name == "draft":  # a draft model always proposes
                        self.assertEqual(set(usage), {"speculative"})
                        self.assertGreater(usage["speculative"]["proposed_tokens"], 0)

    def test_zz_metrics_and_start_lines(self):  # after the others (unittest runs them by name)
        self.assertEqual(spec_counters(self.ctx.server), (0.0, 0.0))
        self.assertIn("speculative decoding: off", log_of(self.ctx.server))
        for name, describe in (("ngram", "prompt lookup of 2-grams"), ("draft", "a draft model of 2 layers")):
            with self.subTest(server=name):
                proposed, accepted = spec_counters(self.servers[name])
                self.assertGreater(proposed, 0)
                self.assertLessEqual(accepted, proposed)
                self.assertIn(f"speculative decoding: {describe}", log_of(self.servers[name]))
        self.assertIn(f"up to {K} tokens per sequence and step", log_of(self.servers["draft"]))
        self.assertIn("MiB of rank 0's --kv-cache-memory", log_of(self.servers["draft"]))  # the draft's share
