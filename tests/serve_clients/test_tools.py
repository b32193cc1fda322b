"""Tool calls through the openai SDK (docs/architecture.md §8, "Tool calls"): a server on the
suite's random model with the Olmo 3 Instruct chat template (which takes `tools`;
tests/serve/fixtures/chat_templates.json) answers tool_choice "required" and a named
function with tool_calls whose arguments validate against the functions' parameters
(Python's jsonschema), greedy and seeded, whole and streamed; a round trip (call → tool
message → answer) works; tool_choice auto parses a call the model is forced (guided_regex)
to write in Olmo 3's syntax, whole and streamed; tool_choice naming an unknown function is
a 400 naming it."""
import json
import os

import jsonschema

from harness import MODEL_NAME, REPO, SdkCase, Server, tail

import harness

# Small: the suite's model has a 256-token context, and the template writes the tools
# into the system turn.
TOOLS = [
    {"type": "function", "function": {"name": "weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 6}, "unit": {"enum": ["C", "F"]}}, "required": ["city", "unit"]}}},
    {"type": "function", "function": {"name": "book", "parameters": {"type": "object", "properties": {
        "n": {"type": "integer", "minimum": 1, "maximum": 9}, "vegan": {"type": "boolean"}}, "required": ["n"]}}},
]
PARAMETERS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
MESSAGES = [{"role": "system", "content": "Hi."}, {"role": "user", "content": "Paris?"}]
MAX_TOKENS = 32


class Tools(SdkCase):
    server = None

    @classmethod
    def setUpClass(cls):
        ctx = harness.RUNNING
        with open(os.path.join(REPO, "tests", "serve", "fixtures", "chat_templates.json"), encoding="utf-8") as f:
            template = json.load(f)["templates"]["olmo3"]["template"]
        tmp = os.path.join(ctx.tmp_dir.name, "tools")
        os.makedirs(tmp)
        path = os.path.join(tmp, "olmo3.jinja")
        with open(path, "w", encoding="utf-8") as f:
            f.write(template)
        cls.server = Server(ctx.args, ctx.model, tmp, ["--chat-template", path])
        import openai
        cls.tools_client = openai.OpenAI(base_url=f"{cls.server.base}/v1", api_key=cls.server.key, max_retries=0,
                                         timeout=harness.REQUEST_TIMEOUT)

    @classmethod
    def tearDownClass(cls):
        status = cls.server.stop()
        assert status == 0, f"the tools server exited with status {status}:\n{tail(cls.server.log)}"

    def tool_chat(self, **kw):
        return self.tools_client.chat.completions.create(model=MODEL_NAME, messages=kw.pop("messages", MESSAGES),
                                                         tools=TOOLS, max_tokens=kw.pop("max_tokens", MAX_TOKENS), **kw)

    def check_calls(self, calls, names=None):
        self.assertTrue(calls, "no tool calls")
        for c in calls:
            self.assertEqual(c.type, "function")
            self.assertTrue(c.id.startswith("call_"))
            self.assertIn(c.function.name, names or PARAMETERS)
            jsonschema.validate(json.loads(c.function.arguments), PARAMETERS[c.function.name])

    def test_named_function_gives_valid_arguments(self):
        for sampling in ({"temperature": 0}, {"temperature": 1, "seed": 3}, {"temperature": 1, "seed": 11}):
            with self.subTest(**sampling):
                r = self.tool_chat(tool_choice={"type": "function", "function": {"name": "book"}}, **sampling)
                m = r.choices[0].message
                self.assertIsNone(m.content)
                self.assertEqual(len(m.tool_calls), 1)
                self.check_calls(m.tool_calls, ["book"])
                self.assertIn(r.choices[0].finish_reason, ("stop", "length"))

    def test_required_gives_valid_calls(self):
        for sampling in ({"temperature": 0}, {"temperature": 1, "seed": 5}):
            with self.subTest(**sampling):
                r = self.tool_chat(tool_choice="required", **sampling)
                self.check_calls(r.choices[0].message.tool_calls)
                self.assertEqual(r.choices[0].finish_reason, "tool_calls")
        r = self.tool_chat(tool_choice="required", parallel_tool_calls=False, temperature=0)
        self.assertEqual(len(r.choices[0].message.tool_calls), 1)

    def test_streamed_calls_come_whole_in_the_last_delta(self):
        whole = self.tool_chat(tool_choice={"type": "function", "function": {"name": "weather"}}, temperature=0)
        chunks = list(self.tool_chat(tool_choice={"type": "function", "function": {"name": "weather"}},
                                     temperature=0, stream=True))
        deltas = [c.choices[0].delta for c in chunks if c.choices]
        calls = [tc for d in deltas for tc in (d.tool_calls or [])]
        self.assertEqual(len(calls), 1)
        self.assertEqual(calls[0].index, 0)
        self.assertEqual(calls[0].function.arguments, whole.choices[0].message.tool_calls[0].function.arguments)
        self.check_calls(calls, ["weather"])

    def test_round_trip_call_tool_message_answer(self):
        r = self.tool_chat(tool_choice={"type": "function", "function": {"name": "weather"}}, temperature=0)
        call = r.choices[0].message.tool_calls[0]
        history = MESSAGES + [
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": call.id, "type": "function",
                             "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
            {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"t": 21})}]
        answer = self.tool_chat(messages=history, tool_choice="auto", temperature=0, max_tokens=4)
        self.assertIsInstance(answer.choices[0].message.content, str)
        self.assertGreater(answer.usage.prompt_tokens, r.usage.prompt_tokens)  # the call and the result were rendered
        # The assistant's call is in the prompt the template made (olmo3: pythonic, in <function_calls>).
        none = self.tool_chat(messages=history, tool_choice="none", temperature=0, max_tokens=4)
        self.assertEqual(none.choices[0].message.content, answer.choices[0].message.content)

    def test_auto_parses_the_models_own_call_syntax(self):
        # The model is forced (guided_regex) to write a call in Olmo 3's syntax.
        forced = r'<function_calls>weather\(city="Rome", unit="C"\)</function_calls>'
        expected = [("weather", {"city": "Rome", "unit": "C"})]
        r = self.tool_chat(tool_choice="auto", temperature=0, max_tokens=64, extra_body={"guided_regex": forced})
        m = r.choices[0].message
        self.assertEqual(r.choices[0].finish_reason, "tool_calls")
        self.assertIsNone(m.content)
        self.assertEqual([(c.function.name, json.loads(c.function.arguments)) for c in m.tool_calls], expected)
        chunks = list(self.tool_chat(tool_choice="auto", temperature=0, max_tokens=64, stream=True,
                                     extra_body={"guided_regex": forced}))
        deltas = [c.choices[0].delta for c in chunks if c.choices]
        self.assertEqual("".join(d.content or "" for d in deltas), "")  # the call's text is not streamed as content
        calls = [tc for d in deltas for tc in (d.tool_calls or [])]
        self.assertEqual([(c.function.name, json.loads(c.function.arguments)) for c in calls], expected)

    def test_unknown_function_is_a_400_naming_it(self):
        import openai
        with self.assertRaises(openai.BadRequestError) as e:
            self.tool_chat(tool_choice={"type": "function", "function": {"name": "nope"}})
        self.assertEqual(e.exception.param, "tool_choice.function.name", e.exception.body)
