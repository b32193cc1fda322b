#!/usr/bin/env python3
"""Integration test of the serving exporter with deploy/ (ctest deploy.serve_integration,
label integration). Python 3 standard library only.

Makes a tiny random OLMo 2 model (bench/olmo2_random_model: 2 layers, hidden 64, the
Dolma 2 tokenizer), serves it with `mpirun -np 2 olmo2 serve --tp 2` and a KV cache of
64 blocks (256 KiB a rank) on a port the kernel picks (--port 0, read back from
--port-file), and starts a real Prometheus on loopback, port 0 too (a copy of
deploy/prometheus/prometheus.yml whose olmo2-serve local targets file names this server, 1 s
scrape and evaluation intervals, the real rule files). It sends, with urllib:

  * two warm-up completions (one streamed), then bad requests that must get HTTP 400
    (empty prompt, max_tokens 0, a negative temperature, n = 0, an unknown model, an id
    outside the vocabulary, a prompt plus max_tokens over the context, a body that is
    not JSON, a streamed empty prompt);
  * a streamed request whose client hangs up after two events (outcome "cancelled");
  * CONCURRENT requests at once, half streamed, greedy and seeded sampling, each needing
    8 KV blocks with --max-running-requests 16: the 64 blocks run out, so the scheduler
    pre-empts (olmo2_serve_preemptions_total > 0) and every answer still completes.

Then, through Prometheus's HTTP API, once it has scraped the idle server after the load:

  * every olmo2_serve_* metric of deploy/metrics.txt exists with exactly its labels
    (outcome: the four values), and no olmo2_serve_* series the contract does not list;
  * olmo2_serve_requests_total: success = the answers counted here, error = the 400s,
    cancelled = 1, rejected = 0; the token counters equal the sum of the answers' usage;
    TTFT, end-to-end and queue-time counts = successes; inter-token latency count at
    least the successes' tokens minus one each; preemptions > 0; running, waiting and
    KV-cache use back to 0;
  * every panel expression of deploy/grafana/olmo2-serving.json (panel_queries.py, job
    and instance substituted) parses and returns data;
  * every serving recording rule is healthy and has a value for this job, and
    Olmo2ServeClientErrorRatioHigh is pending (the 400s are far above 25% of the requests)
    while Olmo2ServeErrorRatioHigh stays silent (400s are client mistakes, outcome
    "invalid", not server errors).

It also checks the server's own /metrics: `promtool check metrics` clean and each
olmo2_serve_* family's TYPE as in metrics.txt. Finally SIGUSR1 to mpirun (forwarded to
both ranks) must stop the server with exit status 0. Prometheus, the server and the
temporary folder are removed on every exit path.

Usage: serve_integration.py --olmo2 PATH --random-model PATH --tokenizer PATH
                            --mpiexec PATH --prometheus PATH --promtool PATH
"""
import argparse
import concurrent.futures
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prometheus_harness import (HeldPort, Prometheus, TestFailure as Failure, api,  # noqa: E402
                                check_families, check_panels, contract, popen, port_from_file, query, stop_job,
                                tail, wait_for, write_config)

JOB = "olmo2-serve"
CONTEXT = 128
MODEL_CONFIG = {
    "architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "vocab_size": 100352, "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": CONTEXT, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
    "tie_word_embeddings": False, "eos_token_id": 100257,
}
# 256 KiB a rank at tp 2 (1 KV head of 16 a rank, 2 layers, fp32) = 64 blocks of 16 positions.
SERVE_OPTIONS = ["--tp", "2", "--threads", "1", "--max-batch-tokens", "64", "--max-running-requests", "16",
                 "--kv-cache-memory", "256KiB", "--shutdown-grace", "5"]
CONCURRENT = 32
# ~40 prompt tokens + 80 generated = 8 blocks each: 16 running sequences would need 128 of the 64.
LONG_PROMPT = " ".join(f"word{i}" for i in range(20))
LONG_TOKENS = 80
BAD_REQUESTS = [  # (what, body): each must be answered 400
    ("empty prompt", {"prompt": "", "max_tokens": 4}),
    ("max_tokens 0", {"prompt": "Hello", "max_tokens": 0}),
    ("negative temperature", {"prompt": "Hello", "temperature": -1}),
    ("n = 0", {"prompt": "Hello", "n": 0}),
    ("unknown model", {"prompt": "Hello", "model": "no-such-model"}),
    ("id outside the vocabulary", {"prompt": [10 ** 7]}),
    ("prompt + max_tokens over the context", {"prompt": "Hello", "max_tokens": 10 * CONTEXT}),
    ("a body that is not JSON", b"{\"prompt\": "),
    ("a streamed empty prompt", {"prompt": "", "stream": True}),
]


class Client:
    """The completions API over urllib; answers parsed, streams read to [DONE]."""

    def __init__(self, base):
        self.base = base

    def open(self, body, timeout=120):
        if isinstance(body, dict) and body.get("stream"):  # the usage comes in a last chunk of its own
            body = dict(body, stream_options={"include_usage": True})
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.base}/v1/completions", data=data,
                                     headers={"Content-Type": "application/json"})
        return urllib.request.urlopen(req, timeout=timeout)

    def complete(self, body):
        """(HTTP status, {"text", "finish_reason", "usage", "events"} or the error body)."""
        try:
            with self.open(body) as resp:
                if not (isinstance(body, dict) and body.get("stream")):
                    answer = json.load(resp)
                    c = answer["choices"][0]
                    return resp.status, {"text": c["text"], "finish_reason": c["finish_reason"],
                                         "usage": answer["usage"], "events": None}
                text, last, events, done, usage = "", None, 0, False, None
                for line in resp:
                    line = line.decode().rstrip("\r\n")
                    if not line.startswith("data: "):
                        continue
                    if line == "data: [DONE]":
                        done = True
                        break
                    ev = json.loads(line[6:])
                    if "error" in ev:
                        raise Failure(f"stream of {body} ended in an error: {ev}")
                    if not ev["choices"]:  # include_usage's chunk: usage only
                        usage = ev["usage"]
                        continue
                    events += 1
                    text += ev["choices"][0]["text"]
                    last = ev
                if not done or last is None:
                    raise Failure(f"stream of {body} ended without data: [DONE] ({events} events)")
                return resp.status, {"text": text, "finish_reason": last["choices"][0]["finish_reason"],
                                     "usage": usage, "events": events}
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")

    def metrics(self):
        """The server's own /metrics: (text, {series: value})."""
        with urllib.request.urlopen(f"{self.base}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        values = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                series, _, value = line.rpartition(" ")
                values[series] = float(value)
        return text, values


def make_model(args, tmp):
    with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as f:
        json.dump(MODEL_CONFIG, f)
    out = subprocess.run([args.random_model, os.path.join(tmp, "config.json"), args.tokenizer,
                          os.path.join(tmp, "model"), "0.2"], capture_output=True, text=True, timeout=120)
    lines = out.stdout.split()
    if out.returncode != 0 or not lines or not os.path.isdir(lines[-1]):
        raise Failure(f"olmo2_random_model exited with status {out.returncode}:\n{out.stdout}{out.stderr}")
    return lines[-1]


def send_traffic(client, kill_switch):
    """Every request of the test; returns what the server must have counted."""
    n = {"success": 0, "invalid": 0, "cancelled": 0, "prompt_tokens": 0, "generated_tokens": 0, "gaps": 0}
    problems = []

    def served(what, body, status, answer):
        if status != 200:
            problems.append(f"{what}: HTTP {status}: {answer}")
            return
        usage, want = answer["usage"], body["max_tokens"]
        if not usage or answer["finish_reason"] != "length" or usage["completion_tokens"] != want:
            problems.append(f"{what}: finish_reason {answer['finish_reason']!r}, usage {usage}, expected "
                            f"{want} tokens (ignore_eos)")
            return
        if not answer["text"]:
            problems.append(f"{what}: empty text")
        n["success"] += 1
        n["prompt_tokens"] += usage["prompt_tokens"]
        n["generated_tokens"] += usage["completion_tokens"]
        n["gaps"] += usage["completion_tokens"] - 1

    for stream in (False, True):
        body = {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "ignore_eos": True,
                "stream": stream}
        served(f"warm-up (stream {stream})", body, *client.complete(body))

    # Three rounds: 27 refusals of about 62 requests keep the client-error ratio well above
    # the alert's 25% once the load below has run (one round would be about 20%).
    for what, body in BAD_REQUESTS * 3:
        status, answer = client.complete(body)
        if status != 400:
            problems.append(f"{what}: HTTP {status}, expected 400: {answer}")
        else:
            n["invalid"] += 1

    # A client that hangs up: two events, then the socket is closed. The server notices at
    # its next write and cancels the sequence.
    body = {"prompt": "A long story:", "max_tokens": 100, "temperature": 0, "ignore_eos": True, "stream": True}
    with client.open(body, timeout=30) as resp:
        events = 0
        while events < 2:
            line = resp.readline()
            if not line:
                raise Failure("the stream to be disconnected ended before two events")
            events += line.startswith(b"data: ")
    n["cancelled"] += 1
    wait_for("olmo2_serve_requests_total{outcome=\"cancelled\"} == 1 on /metrics",
             lambda: kill_switch() or client.metrics()[1].get('olmo2_serve_requests_total{outcome="cancelled"}') == 1,
             timeout=20)

    def one(i):
        body = {"prompt": f"{LONG_PROMPT} {i}", "max_tokens": LONG_TOKENS, "ignore_eos": True,
                "stream": i % 2 == 1}
        body.update({"temperature": 0} if i % 4 < 2 else {"temperature": 0.8, "top_k": 40, "seed": i})
        return body, client.complete(body)
    with concurrent.futures.ThreadPoolExecutor(max_workers=CONCURRENT) as pool:
        for i, (body, (status, answer)) in enumerate(pool.map(one, range(CONCURRENT))):
            served(f"concurrent request {i} (stream {body['stream']})", body, status, answer)
    if problems:
        raise Failure("\n  ".join(problems))
    return n


def check_contract(series, instance):
    """series: every olmo2_serve_* series of this server (instant query): the contract's
    families with exactly their labels (check_families), each label value once."""
    def check_part(part, labels, got, problems):
        if part.endswith("_bucket"):
            les = [s["metric"].get("le") for s in got]
            if "+Inf" not in les or len(set(les)) != len(les):
                problems.append(f"{part}: buckets {sorted(les)}")
            return
        for label, values in labels.items():
            seen = sorted(s["metric"].get(label, "") for s in got)
            if values is not None and seen != sorted(values):
                problems.append(f"{part}: {label} values {seen}, expected each of {sorted(values)} once")
        if not labels and len(got) != 1:
            problems.append(f"{part}: {len(got)} series, expected 1")
    return check_families(series, "olmo2_serve_", JOB, instance, check_part)


def check_values(series, n):
    """The counters against what this test sent; the gauges back at idle."""
    v = {}
    for s in series:
        m = s["metric"]
        if "le" not in m:
            v[m["__name__"] + (f'{{outcome="{m["outcome"]}"}}' if "outcome" in m else "")] = float(s["value"][1])
    want = {
        'olmo2_serve_requests_total{outcome="success"}': n["success"],
        'olmo2_serve_requests_total{outcome="invalid"}': n["invalid"],
        'olmo2_serve_requests_total{outcome="error"}': 0,
        'olmo2_serve_requests_total{outcome="cancelled"}': n["cancelled"],
        'olmo2_serve_requests_total{outcome="rejected"}': 0,
        "olmo2_serve_prompt_tokens_total": n["prompt_tokens"],
        "olmo2_serve_generated_tokens_total": n["generated_tokens"],
        "olmo2_serve_time_to_first_token_seconds_count": n["success"],
        "olmo2_serve_end_to_end_latency_seconds_count": n["success"],
        "olmo2_serve_queue_time_seconds_count": n["success"],
        "olmo2_serve_running_requests": 0,
        "olmo2_serve_waiting_requests": 0,
        "olmo2_serve_kv_cache_usage_ratio": 0,
    }
    problems = [f"{k} = {v.get(k)}, expected {w}" for k, w in want.items() if v.get(k) != w]
    # The cancelled stream's gaps (at least one: it got two events) count too.
    itl = v.get("olmo2_serve_inter_token_latency_seconds_count", float("nan"))
    if not n["gaps"] < itl < n["gaps"] + 100:
        problems.append(f"olmo2_serve_inter_token_latency_seconds_count = {itl}, expected between "
                        f"{n['gaps'] + 1} and {n['gaps'] + 99} (the successes' gaps plus the cancelled stream's)")
    if not v.get("olmo2_serve_preemptions_total", 0) > 0:
        problems.append(f"olmo2_serve_preemptions_total = {v.get('olmo2_serve_preemptions_total')}: "
                        f"{CONCURRENT} concurrent requests of 8 KV blocks each should have run out of the 64")
    for name in ("time_to_first_token", "end_to_end_latency", "queue_time", "inter_token_latency"):
        total = v.get(f"olmo2_serve_{name}_seconds_sum", float("nan"))
        if not (math.isfinite(total) and total >= 0):
            problems.append(f"olmo2_serve_{name}_seconds_sum = {total}")
    return v, problems


def check_rules(base):
    """Every serving recording rule healthy and with a value for this job."""
    problems, names = [], []
    for group in api(base, "rules", type="record")["groups"]:
        if group["name"] != "olmo2-serve-recording":
            continue
        for rule in group["rules"]:
            names.append(rule["name"])
            if rule.get("health") != "ok":
                problems.append(f"recording rule {rule['name']}: health {rule.get('health')} {rule.get('lastError', '')}")
            _, r = query(base, f'{rule["name"]}{{job="{JOB}"}}')
            if not r:
                problems.append(f"recording rule {rule['name']}: no value for job {JOB}")
    if not names:
        problems.append("no rule group olmo2-serve-recording loaded")
    return names, problems


def run(args, tmp):
    t0 = time.time()
    prom = server = closed = None
    try:
        model = make_model(args, tmp)
        port_file = os.path.join(tmp, "serve.port")
        cmd = [args.mpiexec, "-np", "2", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
               args.olmo2, "serve", "--model", model, "--port", "0", "--port-file", port_file] + SERVE_OPTIONS
        env = dict(os.environ, OMPI_MCA_mpi_yield_when_idle="1", OMP_NUM_THREADS="1")
        with open(os.path.join(tmp, "serve.out"), "w") as out, open(os.path.join(tmp, "serve.err"), "w") as err:
            server = popen(cmd, stdout=out, stderr=err, env=env, cwd=tmp)
        instance = f"127.0.0.1:{port_from_file(port_file, server, 'the server')}"
        client = Client(f"http://{instance}")

        # The olmo2-train local target goes to a port that is bound but not listened on
        # (held until the end, so nothing else gets it; a training run someone has on 9400
        # is not scraped); it is simply down. Prometheus starts as soon as the port is
        # known: it applies new targets only every 5 s, so its first scrape comes a while later.
        closed = HeldPort()
        config = write_config(os.path.join(tmp, "prometheus"),
                              {"olmo2-serve": instance, "olmo2-train": f"127.0.0.1:{closed.port}"})
        prom = Prometheus(args.prometheus, config, tmp)

        def server_alive():
            if server.poll() is not None:
                raise Failure(f"the server exited with status {server.returncode}")
            return False

        def healthy():
            server_alive()
            with urllib.request.urlopen(f"http://{instance}/health", timeout=2) as r:
                return r.status == 200
        wait_for(f"the server to answer http://{instance}/health", healthy, timeout=60)
        prom.wait_ready()
        sel = f'job="{JOB}",instance="{instance}"'
        # A first scrape before any request: the counters' 0 is the baseline of rate().
        wait_for(f"Prometheus to scrape {instance}",
                 lambda: server_alive() or query(prom.base, f"olmo2_serve_requests_total{{{sel}}}")[1], timeout=60)
        print(f"ok: server and Prometheus up, target {JOB}/{instance} scraped ({time.time() - t0:.1f} s)")

        n = send_traffic(client, server_alive)
        print(f"ok: {n['success']} completions (half of the {CONCURRENT} concurrent ones streamed), "
              f"{n['invalid']} bad requests answered 400, 1 stream disconnected ({time.time() - t0:.1f} s)")

        # Prometheus must have the server idle after the load, in 3+ scrapes of the last minute.
        def scraped_idle():
            server_alive()
            _, r = query(prom.base, f'olmo2_serve_requests_total{{{sel},outcome="success"}} == {n["success"]} '
                                    f'and count_over_time(olmo2_serve_requests_total{{{sel},outcome="success"}}[1m]) >= 3 '
                                    f'and on() olmo2_serve_running_requests{{{sel}}} == 0 '
                                    f'and on() olmo2_serve_kv_cache_usage_ratio{{{sel}}} == 0')
            return r
        try:
            wait_for("Prometheus to scrape the idle server after the load", scraped_idle, timeout=20)
        except Failure as e:
            print(f"note: {e}; the checks below say what differs")

        problems = []
        _, series = query(prom.base, f'{{__name__=~"olmo2_serve_.*",{sel}}}')
        p = check_contract(series, instance)
        problems += p
        if not p:
            print(f"ok: every serving metric of deploy/metrics.txt with its labels ({len(series)} series)")
        values, p = check_values(series, n)
        problems += p
        if not p:
            print(f"ok: requests by outcome {n['success']}/{n['invalid']}/1/0 (success/invalid/cancelled/rejected), "
                  f"{n['prompt_tokens']} prompt and {n['generated_tokens']} generated tokens, TTFT count "
                  f"{n['success']}, {values['olmo2_serve_preemptions_total']:g} pre-emptions, idle at the end")

        count, p = check_panels(prom.base, "olmo2-serving.json", JOB, instance)
        problems += p
        if not p:
            print(f"ok: {count} serving-dashboard queries parse and return data")

        names, p = check_rules(prom.base)
        problems += p
        if not p:
            print(f"ok: {len(names)} serving recording rules healthy with values for {JOB}")

        def active(name):
            server_alive()
            return [a for a in api(prom.base, "alerts")["alerts"]
                    if a["labels"].get("alertname") == name
                    and a["labels"].get("job") == JOB and a["state"] in ("pending", "firing")]
        try:
            alert = wait_for("Olmo2ServeClientErrorRatioHigh to be pending",
                             lambda: active("Olmo2ServeClientErrorRatioHigh"), timeout=15)
            print(f"ok: Olmo2ServeClientErrorRatioHigh {alert[0]['state']} "
                  f"({n['invalid']} client errors of {n['success'] + n['invalid'] + n['cancelled']} requests)")
            # The 400s are the clients' mistakes: the server-error alert must stay silent.
            if active("Olmo2ServeErrorRatioHigh"):
                problems.append("Olmo2ServeErrorRatioHigh is active though every error was a 4xx")
        except Failure as e:
            problems.append(str(e))

        exposition, _ = client.metrics()
        check = subprocess.run([args.promtool, "check", "metrics"], input=exposition, capture_output=True, text=True)
        if check.returncode != 0 or check.stdout.strip() or check.stderr.strip():
            problems.append(f"promtool check metrics on http://{instance}/metrics (status {check.returncode}):\n"
                            + check.stdout + check.stderr)
        else:
            print(f"ok: promtool check metrics clean ({len(exposition)} bytes)")
        types = {}
        for line in exposition.splitlines():
            if line.startswith("# TYPE olmo2_serve_"):
                _, _, name, kind = line.split()
                types[name] = kind
        want = {name: kind for name, kind, _ in contract() if name.startswith("olmo2_serve_")}
        if types != want:
            problems.append(f"/metrics TYPE lines {sorted(types.items())}, deploy/metrics.txt has {sorted(want.items())}")
        else:
            print(f"ok: the {len(types)} olmo2_serve_* families have the types of deploy/metrics.txt")

        status = stop_job(server)
        if status != 0:
            problems.append(f"mpirun exited with status {status} after SIGUSR1")
        else:
            print(f"ok: SIGUSR1 stopped the server, mpirun exit status 0 ({time.time() - t0:.1f} s)")
        if problems:
            raise Failure("\n  ".join(problems))
        return 0
    except Failure as e:
        print(f"FAIL {e}")
        if server is not None:
            print(f"--- server stderr (end) ---\n{tail(os.path.join(tmp, 'serve.err'))}")
        return 1
    finally:
        if server is not None:
            stop_job(server)
        if prom is not None:
            prom.stop()
        if closed is not None:
            closed.close()
        print(f"test time {time.time() - t0:.1f} s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--olmo2", required=True)
    ap.add_argument("--random-model", required=True, help="bench/olmo2_random_model")
    ap.add_argument("--tokenizer", required=True, help="a tokenizer.json (data/dolma2-tokenizer.json)")
    ap.add_argument("--mpiexec", required=True)
    ap.add_argument("--prometheus", required=True)
    ap.add_argument("--promtool", required=True)
    ap.add_argument("--keep-tmp", action="store_true", help="leave the temporary folder (for debugging)")
    args = ap.parse_args()
    for what in ("olmo2", "random_model", "mpiexec", "prometheus", "promtool"):
        path = os.path.abspath(getattr(args, what))
        setattr(args, what, path)
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            print(f"FAIL --{what.replace('_', '-')} {path!r} is not an executable")
            return 1
    args.tokenizer = os.path.abspath(args.tokenizer)
    if not os.path.isfile(args.tokenizer):
        print(f"FAIL --tokenizer {args.tokenizer!r} is not a file")
        return 1

    # ctest's timeout or Ctrl-C: stop what was started (the finally blocks) before exiting.
    def interrupted(signum, _frame):
        raise SystemExit(f"FAIL interrupted by {signal.Signals(signum).name}")
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)

    tmp = tempfile.mkdtemp(prefix="olmo2-serve-integration-")
    try:
        return run(args, tmp)
    finally:
        if args.keep_tmp:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
