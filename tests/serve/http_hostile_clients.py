#!/usr/bin/env python3
"""`olmo2 serve` against hostile HTTP clients, over raw sockets (ctest
serve_http.hostile_clients, label integration; docs/architecture.md §8, "HTTP front").
Python 3 standard library only.

Makes a tiny random OLMo 2 model (bench/olmo2_random_model: 2 layers, hidden 64, the
Dolma 2 tokenizer, context 1024) and serves it in one process with --api-key and
--max-body-bytes 4096. Then:

  desync      a POST whose over-limit body holds `GET /v1/models HTTP/1.1` gets exactly
              one response, 413 with param "body", and the connection closes; the same
              with a chunked body; a POST without the key whose body holds
              `GET /metrics HTTP/1.1` gets only its 401.
  framing     Content-Length 100 MB with 1 KiB sent: 413 at once (the body is not
              awaited); Content-Length with Transfer-Encoding: chunked: 400 and close;
              a completion and GET /health pipelined in one write: two answers, in that
              order, on a connection that stays open; {"temperature": 1e999}: 400 with
              param "temperature".
  hang-up     a non-streamed completion whose client closes the connection before the
              answer is cancelled (outcome "cancelled"; nothing left running).
  huge        a 200 MiB request line: 414; a 200 MiB header line: 431; 20 000 short
              header lines: 431; the client is cut off long before it has sent it all,
              and the server's VmRSS grows by less than 8 MiB over the three.
  slowloris   400 connections each sending one header byte a second and 2000 idle
              ones, for 8 s: every second GET /health and a two-token completion on a
              new connection each answer within 1 s, and the server has no more
              threads than before.

With --engine-failure instead (ctest serve_http.engine_failure, label mpi): `mpirun -np 2
olmo2 serve --tp 2 --collective-timeout 8` (mpirun told not to end the job when a rank
dies), a streamed and a non-streamed request in flight, rank 1 killed: the non-streamed
client gets 500 with the engine's error, the streamed one an error event with code 500
and then `data: [DONE]`, both well within the collective timeout plus a few seconds, and
the server exits with a non-zero status.

Usage: http_hostile_clients.py --olmo2 PATH --random-model PATH --tokenizer PATH
                               [--engine-failure --mpiexec PATH]
"""
import argparse
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

CONTEXT = 128
MODEL_CONFIG = {
    "architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "vocab_size": 100352, "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": CONTEXT, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
    "tie_word_embeddings": False, "eos_token_id": 100257,
}
KEY = "sekret"
AUTH = f"Authorization: Bearer {KEY}\r\n"
MAX_BODY = 4096
MiB = 1 << 20


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


# ---- a raw HTTP/1.1 client ------------------------------------------------------------

class Conn:
    """One TCP connection; reads responses as the server frames them."""

    def __init__(self, port, timeout=10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""
        self.eof = False

    def send(self, data):
        self.sock.sendall(data if isinstance(data, bytes) else data.encode())

    def _fill(self):
        try:
            chunk = self.sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            self.eof = True
        self.buf += chunk
        return bool(chunk)

    def _line(self):
        while b"\r\n" not in self.buf:
            if not self._fill():
                raise Failure(f"the connection ended inside a response: {self.buf[:200]!r}")
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line.decode("latin-1")

    def _take(self, n):
        while len(self.buf) < n:
            if not self._fill():
                raise Failure("the connection ended inside a response body")
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def response(self):
        """(status, {lower-case name: value}, body bytes), or None when the server closed
        the connection before another response."""
        while not self.buf:
            if not self._fill():
                return None
        status = int(self._line().split(" ", 2)[1])
        headers = {}
        while True:
            line = self._line()
            if not line:
                break
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self._line().split(";")[0], 16)
                if size == 0:
                    self._line()
                    break
                body += self._take(size)
                self._take(2)
        else:
            body = self._take(int(headers.get("content-length", "0")))
        return status, headers, body

    def closed_by_server(self, wait=3.0):
        """True when the server ends the connection (EOF or reset) within `wait` seconds
        and sends nothing more."""
        self.sock.settimeout(wait)
        try:
            while self._fill():
                pass
        except socket.timeout:
            return False
        return self.eof and not self.buf

    def close(self):
        self.sock.close()


def request(method, path, body=b"", headers="", keep_alive=True):
    body = body if isinstance(body, bytes) else body.encode()
    head = f"{method} {path} HTTP/1.1\r\nHost: t\r\n{headers}"
    if body or method == "POST":
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    if not keep_alive:
        head += "Connection: close\r\n"
    return head.encode() + b"\r\n" + body


def error_of(body):
    return json.loads(body)["error"]


# ---- the server -----------------------------------------------------------------------

def port_from_file(path, proc, log, timeout=120):
    """The port `olmo2 serve --port 0 --port-file path` bound: the part after the last
    ':' of the file's first line (HOST:PORT, written atomically once it listens). Servers
    bind port 0 and say which port they got, so that no port picked in advance can be
    taken by another test before the server binds it."""
    end = time.time() + timeout
    while True:
        try:
            with open(path, encoding="utf-8") as f:
                line = f.readline().strip()
        except FileNotFoundError:
            line = ""
        if line:
            port = line.rpartition(":")[2]
            check(port.isdigit() and 0 < int(port) < 65536, f"{path} starts with {line!r}, not HOST:PORT")
            return int(port)
        if proc.poll() is not None:
            raise Failure(f"the server exited with status {proc.returncode} before writing {path}:\n{tail(log)}")
        if time.time() > end:
            raise Failure(f"the server wrote no port to {path} within {timeout} s:\n{tail(log)}")
        time.sleep(0.1)


def make_model(args, tmp, context=CONTEXT):
    config = dict(MODEL_CONFIG, max_position_embeddings=context)
    with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
    out = subprocess.run([args.random_model, os.path.join(tmp, "config.json"), args.tokenizer,
                          os.path.join(tmp, "model"), "0.2"], capture_output=True, text=True, timeout=120)
    lines = out.stdout.split()
    if out.returncode != 0 or not lines or not os.path.isdir(lines[-1]):
        raise Failure(f"olmo2_random_model exited with status {out.returncode}:\n{out.stdout}{out.stderr}")
    return lines[-1]


def wait_healthy(port, proc, log, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise Failure(f"the server exited with status {proc.returncode}:\n{tail(log)}")
        try:
            c = Conn(port, timeout=2)
            c.send(request("GET", "/health", keep_alive=False))
            r = c.response()
            c.close()
            if r and r[0] == 200:
                return
        except (OSError, Failure):
            pass
        time.sleep(0.2)
    raise Failure(f"the server did not answer /health within {timeout} s:\n{tail(log)}")


def tail(path, n=30):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def proc_status(pid, field):
    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise Failure(f"no {field} in /proc/{pid}/status")


def raise_open_files(want):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= want


# ---- the checks -----------------------------------------------------------------------

def only_one_response(port, data, status, what):
    c = Conn(port)
    c.send(data)
    r = c.response()
    check(r is not None, f"{what}: no response")
    check(r[0] == status, f"{what}: HTTP {r[0]}, expected {status}: {r[2][:300]!r}")
    check(c.closed_by_server(), f"{what}: the connection stayed open or carried more: {c.buf[:200]!r}")
    c.close()
    return r


def desync(port):
    smuggled = b"GET /v1/models HTTP/1.1\r\nHost: t\r\n" + AUTH.encode() + b"\r\n"
    body = smuggled + b" " * (MAX_BODY + 100 - len(smuggled))
    r = only_one_response(port, request("POST", "/v1/completions", body, AUTH), 413, "over-limit body")
    check(error_of(r[2])["param"] == "body", f"413 without param body: {r[2]!r}")
    chunks = b""
    for i in range(0, len(body), 1000):
        part = body[i:i + 1000]
        chunks += f"{len(part):x}\r\n".encode() + part + b"\r\n"
    chunked = (f"POST /v1/completions HTTP/1.1\r\nHost: t\r\n{AUTH}Content-Type: application/json\r\n"
               "Transfer-Encoding: chunked\r\n\r\n").encode() + chunks + b"0\r\n\r\n"
    r = only_one_response(port, chunked, 413, "over-limit chunked body")
    check(error_of(r[2])["param"] == "body", f"chunked 413 without param body: {r[2]!r}")
    metrics = b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n"
    r = only_one_response(port, request("POST", "/v1/completions", metrics), 401, "no API key, a request in the body")
    check(b"API key" in r[2], f"401 body: {r[2]!r}")
    print("desync: 413 (Content-Length), 413 (chunked), 401: one response each, connection closed")


def framing(port):
    c = Conn(port)
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: t\r\n{AUTH}Content-Type: application/json\r\n"
            "Content-Length: 100000000\r\n\r\n").encode()
    start = time.time()
    c.send(head + b"{" + b" " * 1023)
    r = c.response()
    waited = time.time() - start
    check(r is not None and r[0] == 413, f"Content-Length 100 MB: {r and r[0]}")
    check(waited < 1.5, f"the 413 for Content-Length 100 MB took {waited:.2f} s: the body was awaited")
    check(c.closed_by_server(), "the connection stayed open after the 413")
    c.close()

    both = (f"POST /v1/completions HTTP/1.1\r\nHost: t\r\n{AUTH}Content-Type: application/json\r\n"
            "Content-Length: 20\r\nTransfer-Encoding: chunked\r\n\r\n14\r\n" + "{" * 20 + "\r\n0\r\n\r\n")
    only_one_response(port, both.encode(), 400, "Content-Length with Transfer-Encoding: chunked")

    c = Conn(port)
    completion = json.dumps({"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0})
    c.send(request("POST", "/v1/completions", completion, AUTH) + request("GET", "/health"))
    first, second = c.response(), c.response()
    check(first is not None and first[0] == 200 and b"text_completion" in first[2],
          f"pipelined: the first answer is not the completion: {first and first[2][:200]!r}")
    check(second is not None and second[0] == 200 and second[2] == b'{"status":"ok"}',
          f"pipelined: the second answer is not /health: {second and second[2][:200]!r}")
    c.send(request("GET", "/health", keep_alive=False))
    third = c.response()
    check(third is not None and third[0] == 200, "the pipelined connection did not stay open")
    c.close()

    c = Conn(port)
    c.send(request("POST", "/v1/completions", '{"prompt":"Hi","temperature":1e999}', AUTH, keep_alive=False))
    r = c.response()
    check(r is not None and r[0] == 400, f"1e999: HTTP {r and r[0]}")
    err = error_of(r[2])
    check(err["param"] == "temperature" and "1e999" in err["message"], f"1e999: {err}")
    c.close()
    print(f"framing: 413 for Content-Length 100 MB after {waited * 1000:.0f} ms; CL + chunked 400; "
          "pipelined answers in order; 1e999 400 naming temperature")


def metric(port, series):
    c = Conn(port)
    c.send(request("GET", "/metrics", keep_alive=False))
    r = c.response()
    c.close()
    for line in r[2].decode().splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    raise Failure(f"no {series} on /metrics")


def hang_up(port):
    cancelled = 'olmo2_serve_requests_total{outcome="cancelled"}'
    before = metric(port, cancelled)
    c = Conn(port)
    long = json.dumps({"prompt": "Count:", "max_tokens": 1000, "temperature": 0, "ignore_eos": True})
    c.send(request("POST", "/v1/completions", long, AUTH))
    time.sleep(0.1)
    c.close()  # before the answer: a non-streamed client that gave up
    end = time.time() + 5
    while metric(port, cancelled) != before + 1:
        check(time.time() < end, "the non-streamed request of a client that hung up was not cancelled within 5 s")
        time.sleep(0.05)
    check(metric(port, "olmo2_serve_running_requests") == 0, "a request still runs after the hang-up")
    print("hang-up: a non-streamed request whose client closed the connection was cancelled")


def blast(port, prefix, filler, total):
    """Sends prefix + filler… (total bytes) while reading the answer; (status, bytes sent)."""
    c = Conn(port, timeout=10)
    sent = [0]

    def sender():
        block = filler * (MiB // len(filler))
        try:
            c.sock.sendall(prefix)
            sent[0] += len(prefix)
            while sent[0] < total:
                c.sock.sendall(block)
                sent[0] += len(block)
        except OSError:
            pass
    t = threading.Thread(target=sender)
    t.start()
    try:
        r = c.response()
    finally:
        t.join(timeout=20)
        c.close()
    check(not t.is_alive(), "the sender was still sending after 20 s")
    return (r[0] if r else None), sent[0]


def huge(port, pid):
    before = proc_status(pid, "VmRSS")
    cases = [
        ("200 MiB request line", b"GET /", b"a", 414),
        ("200 MiB header line", b"GET /health HTTP/1.1\r\nHost: t\r\nX-Big: ", b"b", 431),
        ("20 000 header lines", b"GET /health HTTP/1.1\r\nHost: t\r\n", b"X-A: 1\r\n", 431),
    ]
    notes = []
    for what, prefix, filler, want in cases:
        total = 200 * MiB if want == 414 or filler == b"b" else 20000 * len(filler)
        status, sent = blast(port, prefix, filler, total)
        check(status == want, f"{what}: HTTP {status}, expected {want}")
        if total == 200 * MiB:
            check(sent < total, f"{what}: the server read all {sent} bytes")
        notes.append(f"{what} → {status} after the client sent {sent / MiB:.1f} MiB")
    # A header whose lines are each within the field limit but whose whole is over 64 KiB,
    # sent at once: 75 fields of 1000 bytes (75 KB) must get 431, not 200.
    c = Conn(port, timeout=10)
    c.send(b"GET /health HTTP/1.1\r\nHost: t\r\n" +
           b"".join(b"X-%d: " % i + b"a" * 1000 + b"\r\n" for i in range(75)) + b"\r\n")
    r = c.response()
    c.close()
    check(r is not None and r[0] == 431, f"a 75 KB header of short fields: HTTP {r[0] if r else None}, expected 431")
    notes.append(f"a 75 KB header of 1000-byte fields → {r[0] if r else None}")
    time.sleep(0.5)
    after = proc_status(pid, "VmRSS")
    grown = (after - before) / 1024
    check(grown < 8, f"VmRSS grew by {grown:.1f} MiB ({before} → {after} KiB)")
    print("huge: " + "; ".join(notes) + f"; VmRSS {before / 1024:.1f} → {after / 1024:.1f} MiB")


def timed(port, data):
    start = time.time()
    c = Conn(port, timeout=5)
    c.send(data)
    r = c.response()
    c.close()
    return time.time() - start, r


def slowloris(port, pid, slow=400, idle=2000, seconds=8):
    if not raise_open_files(slow + idle + 200):
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        scale = max(0.05, (soft - 200) / (slow + idle))
        slow, idle = int(slow * scale), int(idle * scale)
        print(f"slowloris: the open-files limit is {soft}: {slow} slow and {idle} idle connections instead")
    threads_before = proc_status(pid, "Threads")
    socks = []
    try:
        for _ in range(idle):
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        slow_socks = []
        for _ in range(slow):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.setblocking(False)
            slow_socks.append(s)
        socks += slow_socks
        text = b"GET /health HTTP/1.1\r\nHost: t\r\nX-Slow: " + b"z" * 64
        health, completion = [], []
        body = json.dumps({"prompt": "Hi", "max_tokens": 2, "temperature": 0})
        for i in range(seconds):
            tick = time.time()
            for s in slow_socks:
                try:
                    s.send(text[i:i + 1])
                except OSError:
                    pass
            t, r = timed(port, request("GET", "/health", keep_alive=False))
            check(r is not None and r[0] == 200, f"/health during the slowloris: {r}")
            health.append(t)
            t, r = timed(port, request("POST", "/v1/completions", body, AUTH, keep_alive=False))
            check(r is not None and r[0] == 200, f"a completion during the slowloris: {r}")
            completion.append(t)
            time.sleep(max(0.0, 1 - (time.time() - tick)))
        threads = proc_status(pid, "Threads")
        rss = proc_status(pid, "VmRSS")
    finally:
        for s in socks:
            s.close()
    check(max(health) < 1 and max(completion) < 1,
          f"answers took up to {max(health):.3f} s (/health) and {max(completion):.3f} s (completion)")
    check(threads <= threads_before, f"the server went from {threads_before} to {threads} threads")
    med = lambda xs: sorted(xs)[len(xs) // 2] * 1000  # noqa: E731
    print(f"slowloris: {slow} slow + {idle} idle connections for {seconds} s: /health median "
          f"{med(health):.1f} ms, max {max(health) * 1000:.1f} ms; completion (2 tokens) median "
          f"{med(completion):.1f} ms, max {max(completion) * 1000:.1f} ms; server threads "
          f"{threads_before} → {threads}, VmRSS {rss / 1024:.1f} MiB")


def hostile(args, tmp):
    model = make_model(args, tmp, context=1024)
    log = os.path.join(tmp, "serve.err")
    port_file = os.path.join(tmp, "serve.port")
    cmd = [args.olmo2, "serve", "--model", model, "--threads", "1", "--port", "0", "--port-file", port_file,
           "--api-key", KEY, "--max-body-bytes", str(MAX_BODY), "--kv-cache-memory", "16MiB"]
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
    try:
        port = port_from_file(port_file, proc, log)
        wait_healthy(port, proc, log)
        desync(port)
        framing(port)
        hang_up(port)
        huge(port, proc.pid)
        slowloris(port, proc.pid)
        check(proc.poll() is None, f"the server exited:\n{tail(log)}")
        proc.send_signal(signal.SIGTERM)
        status = proc.wait(timeout=30)
        check(status == 0, f"the server exited with status {status} after SIGTERM:\n{tail(log)}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def rank_pids(mpirun_pid, port_file):
    """{world rank: pid} of the `olmo2 serve` ranks started with --port-file `port_file`
    (OMPI_COMM_WORLD_RANK)."""
    ranks = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().split(b"\0")
            if b"serve" not in cmdline or port_file.encode() not in cmdline or b"mpirun" in cmdline[0]:
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
        except OSError:
            continue
        if b"OMPI_COMM_WORLD_RANK" in env:
            ranks[int(env[b"OMPI_COMM_WORLD_RANK"])] = int(entry)
    return ranks


def engine_failure(args, tmp):
    model = make_model(args, tmp, context=1024)
    log = os.path.join(tmp, "serve.err")
    port_file = os.path.join(tmp, "serve.port")
    # Long enough that two ranks on a loaded 2-core machine never miss it while healthy
    # (3 s did, once, under a parallel build); short enough to keep the test quick.
    timeout_s = 8
    env = dict(os.environ, OMPI_MCA_mpi_yield_when_idle="1", OMP_NUM_THREADS="1")
    cmd = [args.mpiexec, "-np", "2", "--oversubscribe", "--allow-run-as-root", "--bind-to", "none",
           "--mca", "orte_abort_on_non_zero_status", "0",
           args.olmo2, "serve", "--model", model, "--threads", "1", "--port", "0", "--port-file", port_file,
           "--tp", "2", "--collective-timeout", str(timeout_s)]
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)
    try:
        port = port_from_file(port_file, proc, log)
        wait_healthy(port, proc, log)
        long = {"prompt": "Count:", "max_tokens": 900, "temperature": 0, "ignore_eos": True}
        streamed = Conn(port, timeout=60)
        streamed.send(request("POST", "/v1/completions", json.dumps(dict(long, stream=True)), keep_alive=False))
        plain = Conn(port, timeout=60)
        plain.send(request("POST", "/v1/completions", json.dumps(long), keep_alive=False))
        # The stream's head and its first event: the requests run.
        while b"data: " not in streamed.buf:
            check(streamed._fill(), "the stream ended before its first event")
        ranks = rank_pids(proc.pid, port_file)
        check(sorted(ranks) == [0, 1], f"ranks found: {ranks}")
        os.kill(ranks[1], signal.SIGKILL)
        killed = time.time()
        r = plain.response()
        plain_after = time.time() - killed
        check(r is not None and r[0] == 500, f"non-streamed: HTTP {r and r[0]}: {r and r[2][:300]!r}")
        plain_error = error_of(r[2])
        stream = streamed.response()
        check(stream is not None and stream[0] == 200, f"streamed: HTTP {stream and stream[0]}")
        events = [e[6:] for e in stream[2].decode().split("\n\n") if e.startswith("data: ")]
        check(events and events[-1] == "[DONE]", f"the stream did not end with [DONE]: {events[-2:]}")
        check(len(events) >= 2 and "error" in json.loads(events[-2]), f"no error event before [DONE]: {events[-2:]}")
        stream_error = json.loads(events[-2])["error"]
        check(stream_error["code"] == 500 == plain_error["code"], f"codes: {stream_error} vs {plain_error}")
        check("timed out" in plain_error["message"], f"the error does not say what failed: {plain_error}")
        check(plain_after < timeout_s + 10, f"the error came {plain_after:.1f} s after the kill")
        status = proc.wait(timeout=60)
        check(status != 0, "mpirun exited 0 after a rank died")
        print(f"engine failure: rank 1 killed; both clients answered 500 after {plain_after:.1f} s "
              f"(--collective-timeout {timeout_s}): {plain_error['message']!r}; the job exited {status}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--olmo2", required=True)
    p.add_argument("--random-model", required=True)
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--engine-failure", action="store_true")
    p.add_argument("--mpiexec")
    args = p.parse_args()
    raise_open_files(4096)
    tmp = tempfile.mkdtemp(prefix="olmo2-http-")
    try:
        if args.engine_failure:
            engine_failure(args, tmp)
        else:
            hostile(args, tmp)
    except Failure as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
