"""The corpus and its judges (tests/structured/corpus; docs/architecture.md §8,
"Structured outputs"), shared by the engine-level test (tests/structured/run_corpus.py)
and the end-to-end one (tests/serve_clients/test_structured_corpus.py).

An output is judged only by reference implementations: a schema entry by Python's
`jsonschema` (Draft 2020-12, formats asserted with its FormatChecker: date-time and time
through rfc3339-validator), a regex entry by `re.fullmatch`, a choice entry by membership.
"""
import glob
import json
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))

# Entries the engine refuses (a 400 in the server), each with a substring of its message.
# The tests print them as XFAIL and fail once one compiles, so the list stays current.
# Refused by design (docs/architecture.md §8): a oneOf whose branches may both match one value (a grammar
# cannot enforce "exactly one"; anyOf would let such a value through).
REFUSED = {
    "suite/oneOf/0": "may both match one value",
    "suite/oneOf/1": "may both match one value",
    "suite/oneOf/7": "may both match one value",
}

# Entries whose outputs the engine is known to get wrong, with why: the walker test prints
# their failures as XFAIL and fails once they pass (its walks are deterministic); the
# end-to-end test does not assert them. None at present.
PENDING = {}


def load(kinds=("schema", "regex", "choice")):
    """Every entry of the corpus files, in file then list order: dicts with "id",
    "source", "kind" and one of "schema", "pattern", "choices"."""
    entries = []
    for path in sorted(glob.glob(os.path.join(HERE, "*.json"))):
        with open(path, encoding="utf-8") as f:
            for e in json.load(f):
                e["kind"] = "schema" if "schema" in e else "regex" if "pattern" in e else "choice"
                if e["kind"] in kinds:
                    entries.append(e)
    return entries


def group(entry_id):
    """The corpus part an id belongs to: suite, function_calling, keywords, pydantic, regex, choice."""
    return entry_id.split("/", 1)[0]


_FORMATS = {"date-time", "date", "time", "uuid", "email"}


def _format_checker():
    import jsonschema
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    missing = [f for f in _FORMATS if f not in checker.checkers]
    if missing:  # date-time and time need rfc3339-validator
        raise RuntimeError(f"jsonschema cannot check the formats {sorted(missing)}: install rfc3339-validator")
    return checker


def check(entry, text):
    """None when `text` satisfies `entry`, else the reason it does not."""
    if entry["kind"] == "regex":
        return None if re.fullmatch(entry["pattern"], text) else f"{text!r} does not fullmatch /{entry['pattern']}/"
    if entry["kind"] == "choice":
        return None if text in entry["choices"] else f"{text!r} is not one of {entry['choices']!r}"
    import jsonschema
    try:
        value = json.loads(text)
    except ValueError as e:
        return f"{text!r} is not JSON: {e}"
    validator = jsonschema.Draft202012Validator(entry["schema"], format_checker=_format_checker())
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    return None if error is None else f"{text!r} is invalid at {list(error.absolute_path)}: {error.message}"
