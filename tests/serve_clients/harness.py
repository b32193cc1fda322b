"""What the client tests share (tests/serve_clients; docs/architecture.md §8, §10): the
interpreter with the `openai` SDK, a tiny random OLMo 2 model with OLMo 2 Instruct's
tokenizer_config.json, a running `olmo2 serve` (one process or under mpirun), and the
references the answers are held to — `olmo2 generate` and `olmo2 tokenize`, other code
paths than the server's, run on the same model.

Python standard library only until ensure_sdk() has switched to the interpreter that
has the SDK.
"""
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(REPO, "tests", "deploy"))
from prometheus_harness import TestFailure, popen, port_from_file, stop_job, tail  # noqa: E402

import olmo2_chat  # noqa: E402

MODEL_NAME = "olmo2-tiny"
CONTEXT = 256
MODEL_CONFIG = {  # 2 layers, hidden 64, the dolma2 vocabulary, weights N(0, 0.2²)
    "architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "vocab_size": 100352, "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": CONTEXT, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
    "tie_word_embeddings": False, "eos_token_id": olmo2_chat.EOS_ID,
}
LAYOUTS = {"single": [], "tp2": ["--tp", "2"], "pp2": ["--pp", "2"]}
SKIP = 77  # ctest's SKIP_RETURN_CODE for this suite
# Seconds a client waits for one answer: the tiny model answers in well under a second,
# so a request that hangs fails its case and leaves time for the others (ctest: 300 s).
REQUEST_TIMEOUT = 30
RUNNING = None  # the Context of this run, set by sdk_suite.py


def ensure_sdk(python):
    """Re-runs this program under `python` (the virtual environment scripts/setup.sh makes)
    unless the running interpreter has `openai`. Without it: exit SKIP with the reason, or
    status 1 under CI (CI=true), which must run these tests."""
    try:
        import openai  # noqa: F401
        return
    except ImportError:
        pass
    # Not realpath: a virtual environment's python is a link to the system's.
    if python and os.path.exists(python) and not os.environ.get("OLMO2_CLIENTS_REEXEC"):
        os.environ["OLMO2_CLIENTS_REEXEC"] = "1"
        os.execv(python, [python] + sys.argv)
    reason = (f"the openai SDK is not installed for {python or sys.executable}: run scripts/setup.sh "
              f"(it makes .venv-clients/ with tests/serve_clients/requirements.txt), or configure with "
              f"-DOLMO2_CLIENTS_PYTHON=<a python that has openai>")
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        print(f"FAILED: {reason} (CI must run the client tests)")
        sys.exit(1)
    print(f"SKIPPED: {reason}")
    sys.exit(SKIP)


def run(cmd, timeout=300, **kw):
    """Runs cmd; its stdout, or an AssertionError with its status and output."""
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if out.returncode != 0:
        raise AssertionError(f"{' '.join(cmd[:4])} … exited with status {out.returncode}:\n{out.stdout}{out.stderr}")
    return out.stdout


def make_model(random_model, tokenizer, tmp):
    """A model directory (olmo2_random_model, seed 1, std 0.2: wide logits, greedy far
    from ties) with tokenizer_config.json; returns its path."""
    config = os.path.join(tmp, "config.json")
    with open(config, "w", encoding="utf-8") as f:
        json.dump(MODEL_CONFIG, f)
    path = run([random_model, config, tokenizer, os.path.join(tmp, "model"), "0.2"]).split()[-1]
    olmo2_chat.write_tokenizer_config(path)
    return path


class Server:
    """`olmo2 serve` in `layout` (single, tp2, pp2: mpirun -np 2) on a port the kernel
    picks (--port 0; the port read back from its --port-file), with the API key only in
    the environment (OLMO2_API_KEY); `extra`: more `olmo2 serve` options."""

    def __init__(self, args, model, tmp, extra=()):
        self.key = secrets.token_hex(16)
        port_file = os.path.join(tmp, "serve.port")
        cmd = [args.olmo2, "serve", "--model", model, "--port", "0", "--port-file", port_file,
               "--served-model-name", MODEL_NAME,
               "--threads", "1", "--kv-cache-memory", "64MiB", "--shutdown-grace", "2"]
        cmd += LAYOUTS[args.layout] + list(extra)
        if args.layout != "single":
            cmd = [args.mpiexec, "-np", "2", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"] + cmd
        env = dict(os.environ, OLMO2_API_KEY=self.key, OMPI_MCA_mpi_yield_when_idle="1", OMP_NUM_THREADS="1")
        self.log = os.path.join(tmp, "serve.err")
        with open(os.path.join(tmp, "serve.out"), "w") as out, open(self.log, "w") as err:
            self.proc = popen(cmd, stdout=out, stderr=err, env=env, cwd=tmp)
        try:
            self.port = port_from_file(port_file, self.proc, "the server", timeout=120)
        except TestFailure as e:
            raise AssertionError(f"{e}:\n{tail(self.log)}") from None
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the server exited with status {self.proc.returncode}:\n{tail(self.log)}")
            try:
                with urllib.request.urlopen(f"{self.base}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"the server did not answer /health within 120 s:\n{tail(self.log)}")

    def stop(self):
        """SIGUSR1 (forwarded by mpirun to every rank), then harder; the exit status."""
        return stop_job(self.proc, timeout=30)


def _byte_of():
    """Byte-level BPE's spelling, undone: the bytes that are not printable Latin-1 are
    spelled as the characters from U+0100 on, in byte order; the others as themselves."""
    printable = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255]
    others = [b for b in range(256) if b not in printable]
    return {**{chr(b): b for b in printable}, **{chr(256 + i): b for i, b in enumerate(others)}}


BYTE_OF = _byte_of()


class References:
    """`olmo2 generate` (greedy, one process) and `olmo2 tokenize --ids` on the served
    model, memoised: the values the server's answers must equal."""

    def __init__(self, args, model):
        self.olmo2, self.model = args.olmo2, model
        self.tokenizer = os.path.join(model, "tokenizer.json")
        self._cache = {}

    def generate(self, max_tokens, text=None, ids=None):
        """{"output_ids", "finish_reason", "text" (with text)} of greedy decoding."""
        key = (max_tokens, text, tuple(ids) if ids else None)
        if key not in self._cache:
            prompt = ["--prompt", text] if text is not None else ["--prompt-ids", ",".join(map(str, ids))]
            out = run([self.olmo2, "generate", "--model", self.model, "--max-tokens", str(max_tokens),
                       "--temperature", "0", "--format", "json", "--threads", "1"] + prompt)
            self._cache[key] = json.loads(out.strip().splitlines()[-1])
        return self._cache[key]

    def tokenize(self, text):
        if ("tok", text) not in self._cache:
            self._cache[("tok", text)] = json.loads(
                run([self.olmo2, "tokenize", "--tokenizer", self.tokenizer, "--ids"], input=text))
        return self._cache[("tok", text)]

    def vocab(self):
        if "vocab" not in self._cache:
            with open(self.tokenizer, encoding="utf-8") as f:
                t = json.load(f)
            v = dict(t["model"]["vocab"])
            v.update({a["content"]: a["id"] for a in t["added_tokens"]})
            self._cache["vocab"] = v
            self._cache["by_id"] = {i: s for s, i in v.items()}
        return self._cache["vocab"]

    def token_text(self, token_id):
        """A token's text on its own, incomplete UTF-8 replaced by U+FFFD; "" for the
        model's padding rows past the tokenizer's vocabulary (ids 100278 … 100351)."""
        self.vocab()
        s = self._cache["by_id"].get(token_id, "")
        if not all(c in BYTE_OF for c in s):  # an added token, e.g. <|endoftext|>
            return s
        return bytes(BYTE_OF[c] for c in s).decode("utf-8", errors="replace")


class Context:
    """One model, one server and its clients for a whole run (set up by sdk_suite.py)."""

    def __init__(self, args):
        import openai
        self.tmp_dir = tempfile.TemporaryDirectory(prefix="olmo2-sdk-")
        tmp = self.tmp_dir.name
        self.args, self.layout = args, args.layout
        self.model = make_model(args.random_model, args.tokenizer, tmp)
        self.refs = References(args, self.model)
        t0 = time.time()
        self.server = Server(args, self.model, tmp)
        print(f"server up in {time.time() - t0:.1f} s ({args.layout}) at {self.server.base}")
        self.client = self.make_client(self.server.key)
        self.root_client = openai.OpenAI(base_url=self.server.base, api_key=self.server.key, max_retries=0,
                                         timeout=REQUEST_TIMEOUT)

    def make_client(self, key):
        import openai
        return openai.OpenAI(base_url=f"{self.server.base}/v1", api_key=key, max_retries=0, timeout=REQUEST_TIMEOUT)

    def close(self):
        status = self.server.stop()
        log = tail(self.server.log)
        self.tmp_dir.cleanup()
        return status, log


class SdkCase(unittest.TestCase):
    """A test case against the running server: self.client (the SDK, with the key),
    self.refs (References), and shorthands for the two endpoints."""
    maxDiff = None

    @property
    def ctx(self):
        return RUNNING

    @property
    def client(self):
        return RUNNING.client

    @property
    def refs(self):
        return RUNNING.refs

    def complete(self, **kw):
        """client.completions.create for the served model; vLLM's fields go in extra_body."""
        return self.client.completions.create(model=MODEL_NAME, **kw)

    def chat(self, **kw):
        return self.client.chat.completions.create(model=MODEL_NAME, **kw)

    def greedy(self, prompt, max_tokens, **kw):
        """The text of a greedy completion."""
        return self.complete(prompt=prompt, max_tokens=max_tokens, temperature=0, **kw).choices[0].text
