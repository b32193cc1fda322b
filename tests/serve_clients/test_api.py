"""The API around generation, through the openai SDK: refusals as the SDK's exceptions
with the offending field in `param`, the API key from OLMO2_API_KEY, response ids,
/v1/models/{id}, vLLM's /tokenize and /detokenize, and answers that prefix caching must
not change."""
import concurrent.futures
import re
import json
import urllib.request

import openai

import harness
from harness import MODEL_NAME, SdkCase
from olmo2_chat import CONVERSATIONS, render

TOOL = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                         "parameters": {"type": "object",
                                                        "properties": {"city": {"type": "string"}}}}}


class Api(SdkCase):
    def assert_refused(self, call, param):
        with self.assertRaises(openai.BadRequestError) as e:
            call()
        self.assertEqual(e.exception.status_code, 400)
        self.assertEqual(e.exception.param, param, e.exception.body)

    def test_refusals_name_the_field(self):
        msgs = CONVERSATIONS[0]
        cases = {
            "suffix": (lambda: self.complete(prompt="Hi", max_tokens=2, suffix="!"), "suffix"),
            "response_format xml": (lambda: self.chat(messages=msgs, max_tokens=2, response_format={"type": "xml"}),
                                    "response_format.type"),
            "tools": (lambda: self.chat(messages=msgs, max_tokens=2, tools=[TOOL]), "tools"),
            "n = 0": (lambda: self.complete(prompt="Hi", max_tokens=2, n=0), "n"),
            "chat n = 0": (lambda: self.chat(messages=msgs, max_tokens=2, n=0), "n"),
            "logit_bias 200": (lambda: self.complete(prompt="Hi", max_tokens=2, logit_bias={"100": 200}),
                               "logit_bias"),
            "logit_bias -101": (lambda: self.complete(prompt="Hi", max_tokens=2, logit_bias={"100": -101}),
                                "logit_bias"),
            "logit_bias outside the vocabulary": (
                lambda: self.complete(prompt="Hi", max_tokens=2, logit_bias={"1000000": 5}), "logit_bias"),
        }
        for what, (call, param) in cases.items():
            with self.subTest(what):
                self.assert_refused(call, param)

    def test_unknown_model(self):
        for call in (lambda: self.client.completions.create(model="no-such-model", prompt="Hi", max_tokens=2),
                     lambda: self.client.chat.completions.create(model="no-such-model", messages=CONVERSATIONS[0],
                                                                 max_tokens=2)):
            with self.assertRaises((openai.NotFoundError, openai.BadRequestError)) as e:
                call()
            if isinstance(e.exception, openai.BadRequestError):
                self.assertEqual(e.exception.param, "model")

    def test_api_key_from_olmo2_api_key(self):
        # The server got its key only through OLMO2_API_KEY (harness.Server).
        self.assertIn(MODEL_NAME, [m.id for m in self.client.models.list().data])
        wrong = self.ctx.make_client("wrong-key")
        no_key = {"extra_headers": {"Authorization": openai.Omit()}}  # the SDK then sends none
        for what, client, kw in (("a wrong key", wrong, {}), ("no key", self.client, no_key)):
            with self.subTest(what):
                with self.assertRaises(openai.AuthenticationError):
                    client.completions.create(model=MODEL_NAME, prompt="Hi", max_tokens=2, **kw)
                with self.assertRaises(openai.AuthenticationError):
                    client.chat.completions.create(model=MODEL_NAME, messages=CONVERSATIONS[0], max_tokens=2, **kw)
                with self.assertRaises(openai.AuthenticationError):
                    client.models.list(**kw)

    def test_response_ids_are_unique(self):
        ids = [self.complete(prompt="Hi", max_tokens=1).id for _ in range(8)]
        ids += [self.chat(messages=CONVERSATIONS[0], max_tokens=1).id for _ in range(4)]
        ids += [list(self.complete(prompt="Hi", max_tokens=1, stream=True))[0].id for _ in range(4)]
        self.assertEqual(len(set(ids)), len(ids), ids)
        self.assertTrue(all(i.startswith("cmpl-") for i in ids[:8] + ids[12:]), ids)
        self.assertTrue(all(i.startswith("chatcmpl-") for i in ids[8:12]), ids)
        # Random, not a counter: another server (or a restart) must not repeat them.
        suffixes = [re.sub(r"^(chat)?cmpl-", "", i) for i in ids]
        self.assertFalse(all(s.isdigit() for s in suffixes), f"ids look like a counter: {ids}")

    def test_models_list_and_retrieve(self):
        listed = self.client.models.list().data
        self.assertEqual([m.id for m in listed], [MODEL_NAME])
        m = self.client.models.retrieve(MODEL_NAME)
        self.assertEqual((m.id, m.object), (MODEL_NAME, "model"))
        with self.assertRaises(openai.NotFoundError):
            self.client.models.retrieve("no-such-model")
        # The id is a path segment: its escapes are decoded (the SDK sends the "/" of an
        # "allenai/…" name as %2F). Sent raw here, since the SDK would escape the "%".
        escaped = MODEL_NAME.replace("-", "%2D")
        self.assertNotEqual(escaped, MODEL_NAME)
        req = urllib.request.Request(f"{self.ctx.server.base}/v1/models/{escaped}",
                                     headers={"Authorization": f"Bearer {self.ctx.server.key}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            self.assertEqual(json.load(r)["id"], MODEL_NAME)

    def post_root(self, path, body):
        """POST to a path outside /v1 (vLLM's /tokenize, /detokenize), with the key."""
        return self.ctx.root_client.post(path, body=body, cast_to=object)

    def test_tokenize_and_detokenize(self):
        text = "Zwei Männer 🙂 tokenize this"
        ids = self.refs.tokenize(text)
        r = self.post_root("/tokenize", {"model": MODEL_NAME, "prompt": text})
        self.assertEqual(r["tokens"], ids)
        self.assertEqual(r["count"], len(ids))
        self.assertEqual(r["max_model_len"], harness.CONTEXT)
        self.assertEqual(self.post_root("/detokenize", {"model": MODEL_NAME, "tokens": ids})["prompt"], text)

    def test_tokenize_messages_renders_the_chat_template(self):
        for messages in CONVERSATIONS:
            with self.subTest(turns=len(messages)):
                r = self.post_root("/tokenize", {"model": MODEL_NAME, "messages": messages,
                                                 "add_generation_prompt": True})
                self.assertEqual(r["tokens"], self.refs.tokenize(render(messages)))

    def test_prefix_sharing_prompts_equal_olmo2_generate(self):
        # A 3-block shared prefix, prompts that extend it, repeat it, and are a prefix of
        # another: whatever the server reuses of its KV cache, answers stay greedy's.
        prefix = " ".join(f"item{i}" for i in range(30))
        prompts = [prefix + " one", prefix + " two", prefix + " one", prefix]
        refs = {p: self.refs.generate(8, text=p)["text"] for p in set(prompts)}
        for p in prompts:
            self.assertEqual(self.greedy(p, 8), refs[p])
        with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
            got = list(pool.map(lambda p: self.greedy(p, 8), prompts + prompts[:2]))
        self.assertEqual(got, [refs[p] for p in prompts + prompts[:2]])

    def metric(self, name):
        """A counter of the server's /metrics (no key needed there)."""
        with urllib.request.urlopen(f"{self.ctx.server.base}/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        self.fail(f"/metrics has no {name}")

    def test_prefix_cache_hits_are_counted(self):
        # Two prompts sharing their first full KV blocks (16 positions, the default): the
        # second finds them cached, counted in olmo2_serve_prefix_cache_hits_total.
        prefix = " ".join(f"block{i}" for i in range(40))
        a, b = self.refs.tokenize(prefix + " apple"), self.refs.tokenize(prefix + " banana")
        common = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
        self.assertGreaterEqual(common, 48)
        self.greedy(a, 4)  # fills the cache
        before = self.metric("olmo2_serve_prefix_cache_hits_total")
        self.assertEqual(self.greedy(b, 4), self.refs.generate(4, text=prefix + " banana")["text"])
        hits = self.metric("olmo2_serve_prefix_cache_hits_total") - before
        self.assertGreaterEqual(hits, common // 16 * 16, f"{common} prompt tokens in common")
