"""generation_config.json read as vLLM reads it (`--generation-config auto`;
docs/architecture.md §8, "Stop ids and sampling defaults"), through the openai SDK.

A second server runs on a copy of the suite's model directory whose generation_config.json
lists <|im_end|> (100265, OLMo 2 Instruct's chat turn end, not the pretraining EOS) among
its eos ids and sets default sampling values:
- a chat answer steered onto <|im_end|> with logit_bias ends there with
  finish_reason "stop" and no text, streamed or not; `ignore_eos` runs past it; on the
  suite's server (its directory's generation_config.json lists EOS alone) the same
  request runs to max_tokens, as before;
- a request that leaves the sampling fields out gets the file's values: its answer
  equals the suite's server's answer to the same request with those values written out;
  a request's own values win;
- the file's repetition_penalty in greedy decoding equals `olmo2 generate
  --repetition-penalty` (another code path: the CLI's generate loop);
- the start lines name the stop ids and where the defaults came from.
"""
import json
import os

import harness
from harness import MODEL_NAME, SdkCase, Server, run, tail
from olmo2_chat import CONVERSATIONS

IM_END = 100265
GENERATION_CONFIG = {"eos_token_id": [100257, IM_END], "pad_token_id": 100277, "temperature": 0.7, "top_p": 0.9,
                     "top_k": 40, "repetition_penalty": 1.3, "max_new_tokens": 6, "do_sample": True}
# The same values as request fields (what the suite's server must be told explicitly).
EXPLICIT = {"temperature": 0.7, "top_p": 0.9, "max_tokens": 6,
            "extra_body": {"top_k": 40, "repetition_penalty": 1.3}}
PROMPT = "The capital of France is"


class GenerationConfig(SdkCase):
    server = None

    @classmethod
    def setUpClass(cls):
        ctx = harness.RUNNING
        tmp = os.path.join(ctx.tmp_dir.name, "generation-config")
        cls.model = os.path.join(tmp, "model")
        os.makedirs(cls.model)
        # The suite's model as a plain model directory (no training_state.*, whose checksums
        # cover the generation_config.json replaced here).
        for name in os.listdir(ctx.model):
            if name != "generation_config.json" and not name.startswith("training_state"):
                os.symlink(os.path.join(ctx.model, name), os.path.join(cls.model, name))
        with open(os.path.join(cls.model, "generation_config.json"), "w", encoding="utf-8") as f:
            json.dump(GENERATION_CONFIG, f)
        cls.server = Server(ctx.args, cls.model, tmp)
        import openai
        cls.gen_client = openai.OpenAI(base_url=f"{cls.server.base}/v1", api_key=cls.server.key, max_retries=0,
                                       timeout=harness.REQUEST_TIMEOUT)

    @classmethod
    def tearDownClass(cls):
        status = cls.server.stop()
        assert status == 0, f"the generation-config server exited with status {status}:\n{tail(cls.server.log)}"

    def gen_chat(self, **kw):
        return self.gen_client.chat.completions.create(model=MODEL_NAME, **kw)

    def gen_complete(self, **kw):
        return self.gen_client.completions.create(model=MODEL_NAME, **kw)

    def test_end_of_turn_id_ends_the_chat_answer(self):
        steer = {"messages": CONVERSATIONS[0], "max_tokens": 8, "temperature": 0, "logit_bias": {str(IM_END): 100}}
        r = self.gen_chat(**steer)
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertEqual(r.choices[0].message.content, "")
        self.assertEqual(r.usage.completion_tokens, 1)
        chunks = list(self.gen_chat(stream=True, **steer))
        self.assertEqual([c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason],
                         ["stop"])
        self.assertEqual("".join(c.choices[0].delta.content or "" for c in chunks if c.choices), "")
        # ignore_eos ignores every stop id, generation_config.json's too (as vLLM does).
        r = self.gen_chat(extra_body={"ignore_eos": True}, **steer)
        self.assertEqual((r.choices[0].finish_reason, r.usage.completion_tokens), ("length", 8))
        # The suite's server (no <|im_end|> among its stop ids) behaves as before.
        r = self.chat(**steer)
        self.assertEqual((r.choices[0].finish_reason, r.usage.completion_tokens), ("length", 8))

    def test_file_values_are_the_defaults_of_requests(self):
        for seed in (3, 11):
            got = self.gen_complete(prompt=PROMPT, seed=seed)
            want = self.complete(prompt=PROMPT, seed=seed, **EXPLICIT)
            self.assertEqual(got.choices[0].text, want.choices[0].text, f"seed {seed}")
            self.assertEqual(got.usage.completion_tokens, want.usage.completion_tokens)
        self.assertEqual(got.usage.completion_tokens, 6)  # max_new_tokens, not the API's 16
        # Chat without max_tokens: the file's 6, not the rest of the context.
        got = self.gen_chat(messages=CONVERSATIONS[1], seed=5)
        want = self.chat(messages=CONVERSATIONS[1], seed=5, **EXPLICIT)
        self.assertEqual(got.choices[0].message.content, want.choices[0].message.content)
        self.assertEqual(got.usage.completion_tokens, 6)

    def test_request_values_win(self):
        got = self.gen_complete(prompt=PROMPT, max_tokens=9, temperature=0, extra_body={"repetition_penalty": 1.0})
        self.assertEqual(got.choices[0].text, self.refs.generate(9, text=PROMPT)["text"])
        self.assertEqual(got.usage.completion_tokens, 9)

    def test_default_repetition_penalty_equals_generate(self):
        got = self.gen_complete(prompt=PROMPT, max_tokens=6, temperature=0, logprobs=0)
        out = json.loads(run([self.ctx.args.olmo2, "generate", "--model", self.ctx.model, "--prompt", PROMPT,
                              "--max-tokens", "6", "--repetition-penalty", "1.3", "--format", "json",
                              "--threads", "1"]).strip().splitlines()[-1])
        self.assertEqual(got.choices[0].text, out["text"])
        self.assertNotEqual(out["text"], self.refs.generate(6, text=PROMPT)["text"],
                            "the penalty should change this greedy continuation")

    def test_start_lines_name_the_stop_ids_and_defaults(self):
        with open(self.server.log, encoding="utf-8") as f:
            log = f.read()
        self.assertIn("stop ids 100257, 100265 (config.json, generation_config.json); defaults from "
                      "generation_config.json: temperature 0.7, top_p 0.9, top_k 40, repetition_penalty 1.3, "
                      "max_new_tokens 6;", log)  # do_sample: ignored by the server, as vLLM does
        with open(self.ctx.server.log, encoding="utf-8") as f:
            self.assertIn("stop ids 100257 (config.json); defaults from generation_config.json: none", f.read())
