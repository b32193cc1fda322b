#!/usr/bin/env python3
"""Writes fixtures/matcher_cases.json: grammars with an equivalent Python regular
expression, and strings whose membership Python's re.fullmatch decides (the reference
for test_matcher.cpp). Run from anywhere: python3 tests/structured/make_matcher_fixture.py"""
import json
import os
import random
import re

# (grammar text, equivalent regex, alphabet for random strings, hand-picked strings)
CASES = [
    ('root ::= "cat" | "car" | "dog"\n', r'cat|car|dog', ['c', 'a', 'r', 't', 'dog', 'cat'], ['cat', 'car', 'dog', 'ca', 'cats', '']),
    ('root ::= "a"* "b"+ "c"?\n', r'a*b+c?', ['a', 'b', 'bc', 'ab'], ['b', 'aab', 'abbc', 'ac', 'abcc', '']),
    ('root ::= [0-9]{2,4} ("-" [a-f]{3})?\n', r'[0-9]{2,4}(-[a-f]{3})?', ['0', '9', '-', 'af', '12', '-abc'], ['12', '1234', '12345', '12-abc', '12-ab']),
    ('root ::= item ("," item)*\nitem ::= [a-z]+ | num\nnum ::= "-"? [1-9] [0-9]{0,2}\n',
     r'(?:[a-z]+|-?[1-9][0-9]{0,2})(?:,(?:[a-z]+|-?[1-9][0-9]{0,2}))*', ['ab', ',', '-1', '09', 'x,', '7'], ['a,b', '-1,x', '0', '1000', 'a,']),
    ('root ::= [α-ω]+ [^a-z]\n', r'[α-ω]+[^a-z]', 'αβωa!é\n', ['αβ!', 'ω\n', 'αa', 'αβ', 'ωé']),
    ('root ::= "\\"" [^"\\\\\\n]* "\\""\n', r'"[^"\\\n]*"', 'a"\\\nü', ['""', '"abc"', '"a\\"', '"ü€"', '"a\nb"']),
    ('root ::= "x"{3} "y"{2,}\n', r'x{3}y{2,}', ['x', 'y', 'xxx', 'yy'], ['xxxyy', 'xxxyyyy', 'xxyy', 'xxxy']),
    ('root ::= "<" .* ">"\n', r'(?s)<.*>', '<>a\n€', ['<>', '<a\n>', '<>>', '<']),
    ('root ::= [\\U0001F600-\\U0001F64F]{1,2} "!"\n', r'[\U0001F600-\U0001F64F]{1,2}!', ['😀', '🙏', '😎', '!', 'a', '😀!'], ['😀!', '😀🙏!', '😀🙏😀!', '!']),
    ('root ::= [\\x70-\\u0800]+\n', r'[\x70-\u0800]+', 'opzé\u07ff\u0800\u0801o', ['p', '\u0800', '\u0801', 'o']),
    ('root ::= ([^\\x00-\\x7F] | [0-9])+ "."\n', r'(?:[^\x00-\x7F]|[0-9])+\.', 'é9.a\uffff', ['é.', '9.', 'a.', '.']),
    ('# a comment\nroot ::= a\n  | b # alternatives on the next line\na ::= "(" ( "x"\n  | "y" )? ")"\nb ::= "[" [\\]\\-\\^]* "]"\n',
     r'\((?:x|y)?\)|\[[\]\-\^]*\]', ['()', '(', ')', 'x', 'y', '[', ']', '-', '^', '[]'], ['()', '(x)', '(xy)', '[]', '[]-^]', '[^]']),
]


def main():
    rng = random.Random(37)
    out = []
    for grammar, regex, alphabet, picked in CASES:
        strings = list(picked)
        seen = set(strings)
        while len(strings) < len(picked) + 60:
            s = ''.join(rng.choice(alphabet) for _ in range(rng.randint(0, 6)))
            if s not in seen:
                seen.add(s)
                strings.append(s)
        out.append({'grammar': grammar, 'regex': regex,
                    'strings': [{'text': s, 'match': re.fullmatch(regex, s) is not None} for s in strings]})
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'fixtures', 'matcher_cases.json')
    with open(path, 'w', encoding='utf-8') as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write('\n')
    print(path, sum(len(c['strings']) for c in out), 'strings,',
          sum(s['match'] for c in out for s in c['strings']), 'members')


if __name__ == '__main__':
    main()
