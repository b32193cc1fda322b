"""Structured outputs through the openai SDK (docs/architecture.md §8, "Structured
outputs"): response_format json_schema and json_object, guided_json, guided_regex and
guided_choice, streamed and not, on completions and chat — every output of the random
model parses and validates (Python's jsonschema, re); the SDK's parse() with a pydantic
model returns a parsed object; bad constraints are 400s naming the field."""
import json
import re

import openai

from harness import MODEL_NAME, SdkCase

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
        "email": {"anyOf": [{"type": "string", "format": "email"}, {"type": "null"}]},
    },
    "required": ["name", "age", "tags", "email"],
    "additionalProperties": False,
}
MSGS = [{"role": "user", "content": "Describe a person as JSON."}]


def validate(schema, text):
    import jsonschema
    value = json.loads(text)
    jsonschema.validate(value, schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    return value


class Structured(SdkCase):
    def streamed_chat(self, **kw):
        text, finish = "", None
        for chunk in self.chat(stream=True, **kw):
            for c in chunk.choices:
                text += c.delta.content or ""
                finish = c.finish_reason or finish
        return text, finish

    def test_json_schema_chat_validates_greedy_sampled_and_streamed(self):
        rf = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
        for kw in ({"temperature": 0}, {"temperature": 1.0, "seed": 3}, {"temperature": 0.8, "top_p": 0.9, "seed": 4}):
            with self.subTest(**kw):
                r = self.chat(messages=MSGS, max_tokens=80, response_format=rf, n=2, **kw)
                for c in r.choices:
                    self.assertEqual(c.finish_reason, "stop", c.message.content)
                    validate(PERSON, c.message.content)
                text, finish = self.streamed_chat(messages=MSGS, max_tokens=80, response_format=rf, **kw)
                self.assertEqual(finish, "stop")
                validate(PERSON, text)
                if kw.get("seed") is not None or kw["temperature"] == 0:
                    one = self.chat(messages=MSGS, max_tokens=80, response_format=rf, **kw)
                    self.assertEqual(text, one.choices[0].message.content, "streamed = whole")

    def test_json_object_and_guided_json_on_completions(self):
        for extra in ({"response_format": {"type": "json_object"}}, {"guided_json": PERSON},
                      {"guided_json": json.dumps(PERSON)}, {"structured_outputs": {"json": PERSON}}):
            with self.subTest(next(iter(extra))):
                r = self.complete(prompt="JSON:", max_tokens=60, temperature=1.0, seed=7, n=2, extra_body=extra)
                for c in r.choices:
                    self.assertEqual(c.finish_reason, "stop", c.text)
                    value = json.loads(c.text)
                    self.assertIsInstance(value, dict)
                    if "response_format" not in extra:
                        validate(PERSON, c.text)

    def test_regex_and_choice(self):
        pattern = r"(\d{3}-\d{4}|[A-Z][a-z]{1,5})!"
        choices = ["red", "green", "blue", "dark blue"]
        for stream in (False, True):
            for seed in range(3):
                with self.subTest(stream=stream, seed=seed):
                    kw = dict(prompt="Say:", max_tokens=16, temperature=1.0, seed=seed)
                    texts = []
                    for extra in ({"guided_regex": pattern}, {"guided_choice": choices}):
                        if stream:
                            text = "".join(c.choices[0].text for c in self.complete(stream=True, extra_body=extra, **kw)
                                           if c.choices)
                        else:
                            text = self.complete(extra_body=extra, **kw).choices[0].text
                        texts.append(text)
                    self.assertRegex(texts[0], "^" + pattern + "$")
                    self.assertIn(texts[1], choices)
        r = self.chat(messages=MSGS, max_tokens=8, temperature=0, extra_body={"guided_choice": choices})
        self.assertIn(r.choices[0].message.content, choices)

    def test_logprobs_are_the_models_own(self):
        # Greedy under a two-way choice: renormalized over the allowed first tokens the
        # chosen one would have log-probability ≥ log(1/2); the raw distribution of a random
        # model over 100k ids gives far less, and its top alternatives are masked tokens.
        r = self.complete(prompt="Pick:", max_tokens=3, temperature=0, logprobs=5,
                          extra_body={"guided_choice": ["zebra", "yak"]})
        lp = r.choices[0].logprobs
        self.assertIn(r.choices[0].text, ["zebra", "yak"])
        self.assertLess(lp.token_logprobs[0], -2.0)
        best = max(lp.top_logprobs[0].items(), key=lambda kv: kv[1])
        self.assertNotIn(best[0], ("z", "y", "zebra", "yak"), "the raw distribution's best is a masked token")
        self.assertGreater(best[1], lp.token_logprobs[0])
        plain = self.complete(prompt="Pick:", max_tokens=1, temperature=0, logprobs=5)
        for token, logprob in plain.choices[0].logprobs.top_logprobs[0].items():  # (lp's also has its chosen one)
            self.assertEqual(lp.top_logprobs[0].get(token), logprob, f"the same alternatives: {token!r}")

    def test_sdk_parse_returns_a_parsed_object(self):
        import pydantic

        class Pet(pydantic.BaseModel):
            name: str = pydantic.Field(max_length=10)
            legs: int = pydantic.Field(ge=0, le=8)
            kind: str = pydantic.Field(pattern="^(cat|dog|bird)$")

        parse = getattr(self.client.chat.completions, "parse", None) or self.client.beta.chat.completions.parse
        r = parse(model=MODEL_NAME, messages=MSGS, max_tokens=60, temperature=0, response_format=Pet)
        pet = r.choices[0].message.parsed
        self.assertIsInstance(pet, Pet)
        self.assertIn(pet.kind, ("cat", "dog", "bird"))
        self.assertTrue(0 <= pet.legs <= 8)

    def test_bad_constraints_are_400s_naming_the_field(self):
        cases = [
            ({"response_format": {"type": "json_schema", "json_schema": {"schema": PERSON}}},
             "response_format.json_schema.name"),
            ({"guided_json": {"type": "object", "patternProperties": {"x": {}}}}, "guided_json"),
            ({"guided_json": "{not json"}, "guided_json"),
            ({"guided_regex": "(a"}, "guided_regex"),
            ({"guided_choice": []}, "guided_choice"),
            ({"guided_regex": "a", "guided_choice": ["a"]}, "guided_choice"),
        ]
        for extra, param in cases:
            with self.subTest(param=param, extra=json.dumps(extra)[:60]):
                with self.assertRaises(openai.BadRequestError) as e:
                    self.complete(prompt="x", max_tokens=4, extra_body=extra)
                self.assertEqual(e.exception.param, param, e.exception.body)

