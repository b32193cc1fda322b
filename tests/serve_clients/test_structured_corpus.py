"""Structured outputs over HTTP on the suite's random model (docs/architecture.md §8,
"Structured outputs"): whatever a random model prefers, every constrained output parses
and satisfies its constraint as the reference implementations judge it
(tests/structured/corpus/corpus.py: jsonschema, re.fullmatch, membership).

  one process  every corpus schema through response_format json_schema, greedy and
               seeded (the ones corpus.REFUSED lists: a 400 naming the field); every regex through guided_regex and choice list through
               guided_choice; max_tokens set to the fewest bytes a complete output
               takes; the openai SDK's beta.chat.completions.parse() with the corpus's
               pydantic models returns parsed objects.
  tp 2, pp 2   a subset (SUBSET entries per corpus part): greedy outputs equal a
               one-process server's on the same model; seeded ones valid.
"""
import argparse
import concurrent.futures
import json
import os
import sys
import urllib.error
import urllib.request

from harness import MODEL_NAME, SdkCase, Server, tail

import harness

sys.path.insert(0, os.path.join(harness.REPO, "tests", "structured", "corpus"))
import corpus  # noqa: E402
import pydantic_models  # noqa: E402

MAX_TOKENS = 160   # generous but bounded: prompt + this < the model's 256 positions
SEED = 7
SUBSET = 3         # entries per corpus part at tp 2 and pp 2 (18 in all; CI time)
PARALLEL = 8       # requests in flight: the server batches them


def post(server, path, body):
    """The answer's JSON; an HTTP error's body as {"http_error": status, ...}."""
    request = urllib.request.Request(f"{server.base}{path}", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Bearer {server.key}"})
    try:
        with urllib.request.urlopen(request, timeout=harness.REQUEST_TIMEOUT * 2) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        return {"http_error": e.code, "body": e.read().decode(errors="replace")}


def constraint(entry):
    """The request fields that constrain a completion to `entry`."""
    if entry["kind"] == "schema":
        name = entry["id"].replace("/", "_").replace("-", "_")[:64]
        return {"response_format": {"type": "json_schema",
                                    "json_schema": {"name": name, "schema": entry["schema"], "strict": True}}}
    if entry["kind"] == "regex":
        return {"guided_regex": entry["pattern"]}
    return {"guided_choice": entry["choices"]}


def request(entry, seeded, max_tokens=MAX_TOKENS):
    sampling = {"temperature": 1.0, "seed": SEED} if seeded else {"temperature": 0}
    return {"model": MODEL_NAME, "prompt": f"Answer for {entry['id']}:", "max_tokens": max_tokens,
            **sampling, **constraint(entry)}


def answers(server, bodies):
    """post() of every body to /v1/completions, PARALLEL at a time, in order."""
    with concurrent.futures.ThreadPoolExecutor(PARALLEL) as pool:
        return list(pool.map(lambda b: post(server, "/v1/completions", b), bodies))


def subset(entries):
    count, out = {}, []
    for e in entries:
        part = corpus.group(e["id"])
        count[part] = count.get(part, 0) + 1
        if count[part] <= SUBSET:
            out.append(e)
    return out


def judge(case, entries, bodies, results):
    """Asserts every result is a whole, valid output of its entry; prints pass counts."""
    passed, total, failures = {}, {}, []
    for entry, body, r in zip(entries, bodies, results):
        part = corpus.group(entry["id"])
        total[part] = total.get(part, 0) + 1
        refused = corpus.REFUSED.get(entry["id"])
        if refused is not None:  # a 400 naming the field and saying why
            if r.get("http_error") == 400 and refused in r["body"] and "response_format" in r["body"]:
                passed[part] = passed.get(part, 0) + 1
            else:
                failures.append(f"{entry['id']}: expected a 400 naming response_format and saying {refused!r}, "
                                f"got {json.dumps(r)[:300]}")
            continue
        if entry["id"] in corpus.PENDING:
            continue  # known wrong (corpus.PENDING): the engine-level test keeps account
        if "http_error" in r:
            failures.append(f"{entry['id']} ({body.get('temperature')}): HTTP {r['http_error']}: {r['body'][:300]}")
            continue
        text = r["choices"][0]["text"]
        reason = corpus.check(entry, text)
        if reason:
            failures.append(f"{entry['id']} (temperature {body['temperature']}, max_tokens {body['max_tokens']}, "
                            f"finish {r['choices'][0]['finish_reason']}): {reason}")
        else:
            passed[part] = passed.get(part, 0) + 1
    for part in sorted(total):
        print(f"  {part:18s} {passed.get(part, 0):4d} / {total[part]:4d} requests valid")
    case.assertEqual(failures, [], f"{len(failures)} invalid outputs")


class StructuredCorpus(SdkCase):
    def run_corpus(self, kinds):
        if self.ctx.layout != "single":
            self.skipTest("the whole corpus runs in one process; tp 2 and pp 2 compare a subset")
        entries = corpus.load(kinds)
        bodies = [request(e, seeded) for e in entries for seeded in (False, True)]
        doubled = [e for e in entries for _ in (False, True)]
        judge(self, doubled, bodies, answers(self.ctx.server, bodies))

    def test_schemas_greedy_and_seeded(self):
        self.run_corpus(("schema",))

    def test_regexes_and_choices_greedy_and_seeded(self):
        self.run_corpus(("regex", "choice"))

    def test_the_fewest_tokens_that_allow_completion(self):
        """max_tokens = the byte length of the shortest valid output (every byte is a
        token): the output must still complete."""
        if self.ctx.layout != "single":
            self.skipTest("one process only")
        by_id = {e["id"]: e for e in corpus.load()}
        shortest = {"keywords/integer_bounds": "0", "keywords/const_object": json.dumps(
            by_id["keywords/const_object"]["schema"]["const"], separators=(",", ":")),
            "keywords/format_uuid": '"' + "0" * 8 + "-0000" * 3 + "-" + "0" * 12 + '"',
            "keywords/exact_items": "[true,true,true]", "suite/type/5": "true", "regex/yes_no": "no",
            "regex/iso_date": "2000-01-01", "regex/bounded_repeat": "aabbb"}
        for e in corpus.load(("choice",)):
            shortest[e["id"]] = min(e["choices"], key=lambda c: len(c.encode()))
        entries = [by_id[i] for i in shortest]
        bodies = [request(e, seeded, max_tokens=len(shortest[e["id"]].encode()))
                  for e in entries for seeded in (False, True)]
        judge(self, [e for e in entries for _ in (0, 1)], bodies, answers(self.ctx.server, bodies))

    def test_sdk_parse_returns_the_pydantic_object(self):
        """parse() with the models whose outputs are bounded (finish "stop"); the others
        through create() with the strict schema parse() would send, validated by pydantic."""
        if self.ctx.layout != "single":
            self.skipTest("one process only")
        messages = lambda model: [{"role": "user", "content": f"Give me a {model.__name__}."}]  # noqa: E731
        for model in pydantic_models.BOUNDED:
            with self.subTest(model=model.__name__):
                r = self.client.beta.chat.completions.parse(model=MODEL_NAME, messages=messages(model),
                                                            response_format=model, max_tokens=MAX_TOKENS, temperature=0)
                message = r.choices[0].message
                self.assertIsInstance(message.parsed, model, message.content)
                self.assertEqual(message.parsed, model.model_validate_json(message.content))
        strict = {e["id"].split("/")[1]: e["schema"] for e in corpus.load(("schema",)) if e["id"].startswith("pydantic/")}
        for model in pydantic_models.MODELS:
            with self.subTest(model=model.__name__, via="create"):
                r = self.chat(messages=messages(model), max_tokens=MAX_TOKENS, temperature=0, response_format={
                    "type": "json_schema", "json_schema": {"name": model.__name__, "schema": strict[model.__name__],
                                                           "strict": True}})
                self.assertIsInstance(model.model_validate_json(r.choices[0].message.content), model)


class LayoutsAgree(SdkCase):
    """At tp 2 and pp 2: the suite's server and a one-process server on the same model
    give the same constrained outputs."""
    single = None

    @classmethod
    def setUpClass(cls):
        ctx = harness.RUNNING
        if ctx.layout == "single":
            return
        tmp = os.path.join(ctx.tmp_dir.name, "single")
        os.makedirs(tmp)
        cls.single = Server(argparse.Namespace(**dict(vars(ctx.args), layout="single")), ctx.model, tmp)

    @classmethod
    def tearDownClass(cls):
        if cls.single is not None:
            status = cls.single.stop()
            assert status == 0, f"the one-process server exited with status {status}:\n{tail(cls.single.log)}"

    def test_the_same_outputs_as_one_process(self):
        """Greedy outputs equal one process's; seeded ones are judged (the layouts' logits
        differ in their last bits, so a sampled token may differ now and then — printed,
        with the same count for unconstrained requests as a reference)."""
        if self.single is None:
            self.skipTest("tp 2 and pp 2 only")
        entries = subset(corpus.load())
        bodies = [request(e, seeded) for e in entries for seeded in (False, True)]
        ours, theirs = answers(self.ctx.server, bodies), answers(self.single, bodies)
        differ, seeded_equal = [], 0
        for body, a, b in zip(bodies, ours, theirs):
            texts = [x.get("choices", [{}])[0].get("text", x) for x in (a, b)]
            if body["temperature"] > 0:
                seeded_equal += texts[0] == texts[1]
            elif texts[0] != texts[1]:
                differ.append(f"{body['prompt']} (greedy): {texts[0]!r} vs {texts[1]!r}")
        plain = [{"model": MODEL_NAME, "prompt": b["prompt"], "max_tokens": MAX_TOKENS, "temperature": 1.0,
                  "seed": SEED} for b in bodies[1:13:2]]
        plain_equal = sum(a["choices"][0]["text"] == b["choices"][0]["text"]
                          for a, b in zip(answers(self.ctx.server, plain), answers(self.single, plain)))
        n = len(bodies) // 2
        print(f"  greedy: {n - len(differ)} / {n} equal to one process; seeded: {seeded_equal} / {n} "
              f"(unconstrained seeded: {plain_equal} / {len(plain)}) ({self.ctx.layout})")
        self.assertEqual(differ, [])
        judge(self, [e for e in entries for _ in (0, 1)], bodies, ours)
