#!/usr/bin/env python3
"""Token facts for the OpenAI-compatible API tests (tests/serve/), made with the reference
`tokenizers` library and jinja2 (the chat template engine of `transformers`).

Run by scripts/make_fixtures.sh, or alone with the reference environment's python:
    /opt/olmo2-fixtures-venv/bin/python tests/serve/make_api_fixtures.py \
        [path/to/dolma2-tokenizer.json]
The tokenizer path defaults to shared/data/dolma2-tokenizer.json (in the checkout, else
/work/shared/data/); its sha256 must be EXPECTED_SHA256. Deterministic: every string is
written here.

It rewrites tests/serve/fixtures/api_tokens.json:
  versions        python, tokenizers and jinja2 versions, the tokenizer's sha256
  eos             {"id", "special"} of <|endoftext|>
  byte_tokens     the single-byte tokens of 0xE2 0x80 0x99 (the UTF-8 of U+2019) and 0xF0:
                  {"byte", "id", "decoded"}; decoded = decode([id]) — U+FFFD for each, so
                  a decoded-text key cannot tell them apart
  offset_cases    {"name", "ids", "text", "offsets"}: text = decode(ids,
                  skip_special_tokens=True); offsets[i] = characters that Python's
                  incremental UTF-8 decoder (errors="replace") has released after the bytes of
                  ids[:i] with special tokens dropped: the characters of the text returned
                  before token i (a partial character is not released yet)
  prompts         {"text": ids} for the prompts the tests send
  chat            {"template", "bos_token", "messages", "add_generation_prompt",
                   "rendered", "ids"}: the template rendered by jinja2 as transformers does
                  (trim_blocks, lstrip_blocks) and the ids of the rendered text
"""
import argparse
import codecs
import hashlib
import json
import os
import platform

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import jinja2  # noqa: E402
import tokenizers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(HERE, "fixtures", "api_tokens.json")
_CANDIDATES = [os.path.join(REPO, "shared", "data", "dolma2-tokenizer.json"),
               "/work/shared/data/dolma2-tokenizer.json"]
DEFAULT_TOKENIZER = next((p for p in _CANDIDATES if os.path.exists(p)), _CANDIDATES[-1])
EXPECTED_SHA256 = "3ca996cca8afea58b34e95c353e859333592642a5e51d695d7a6dbbaf692dfe9"

# A chat template in the style of OLMo 2's: roles as text markers, the BOS as an added token.
TEMPLATE = ("{{ bos_token }}{% for message in messages %}"
            "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '\\n' }}"
            "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}")
MESSAGES = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi\nthere"},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "Again?"}]


def byte_level_alphabet():
    """The byte-level BPE alphabet: byte b ↦ the character its vocabulary entries use
    (printable Latin-1 bytes map to themselves, the others to U+0100 and up, in order)."""
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(0x100 + extra)
            extra += 1
    return table


def token_bytes(tok, alphabet_inverse, added, i):
    if i in added:
        return added[i].encode("utf-8")
    return bytes(alphabet_inverse[c] for c in tok.id_to_token(i))


def offsets_of(tok, inverse, added, special, ids):
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    out, chars = [], 0
    for i in ids:
        out.append(chars)
        if i not in special:
            chars += len(decoder.decode(token_bytes(tok, inverse, added, i), final=False))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tokenizer", nargs="?", default=DEFAULT_TOKENIZER)
    path = ap.parse_args().tokenizer
    with open(path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    if sha != EXPECTED_SHA256:
        raise SystemExit(f"{path}: sha256 {sha}, expected {EXPECTED_SHA256}")
    tok = Tokenizer.from_file(path)
    with open(path, encoding="utf-8") as f:
        spec = json.load(f)
    added = {a["id"]: a["content"] for a in spec["added_tokens"]}
    special = {a["id"] for a in spec["added_tokens"] if a["special"]}
    alphabet = byte_level_alphabet()
    inverse = {c: b for b, c in alphabet.items()}
    eos = tok.token_to_id("<|endoftext|>")

    byte_tokens = []
    for b in (0xE2, 0x80, 0x99, 0xF0):
        i = tok.token_to_id(alphabet[b])
        assert token_bytes(tok, inverse, added, i) == bytes([b])
        byte_tokens.append({"byte": b, "id": i, "decoded": tok.decode([i])})

    def enc(s):
        return tok.encode(s, add_special_tokens=False).ids

    by_byte = {t["byte"]: t["id"] for t in byte_tokens}
    cases = [
        ("newline_then_eos", enc("\n") + [eos] * 5),
        ("hello", enc("Hello!")),
        ("split_apostrophe", enc("a") + [by_byte[0xE2], by_byte[0x80], by_byte[0x99]] + enc(" b")),
        ("emoji_and_eos", enc("Hi \U0001F642 there") + [eos]),
        ("special_inside", enc("x<|endoftext|>y")),
    ]
    offset_cases = [{"name": n, "ids": ids, "text": tok.decode(ids, skip_special_tokens=True),
                     "offsets": offsets_of(tok, inverse, added, special, ids)} for n, ids in cases]

    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    rendered = env.from_string(TEMPLATE).render(messages=MESSAGES, bos_token="<|endoftext|>",
                                                add_generation_prompt=True)
    out = {
        "versions": {"python": platform.python_version(), "tokenizers": tokenizers.__version__,
                     "jinja2": jinja2.__version__, "tokenizer_sha256": sha},
        "eos": {"id": eos, "special": eos in special},
        "byte_tokens": byte_tokens,
        "offset_cases": offset_cases,
        "prompts": {s: enc(s) for s in ("Hello!", "Once upon a time", " world")},
        "chat": {"template": TEMPLATE, "bos_token": "<|endoftext|>", "messages": MESSAGES,
                 "add_generation_prompt": True, "rendered": rendered, "ids": enc(rendered)},
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=True)
        f.write("\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
