#!/usr/bin/env python3
"""Regenerates the corpus's generated files (tests/structured/corpus; docs/architecture.md
§8, "Structured outputs"):

  suite.json     the JSON Schema Test Suite's draft 2020-12 cases whose schemas use only
                 the keywords the engine supports (docs/architecture.md §8), each with the file and
                 case it came from. The suite (https://github.com/json-schema-org/
                 JSON-Schema-Test-Suite, MIT licence, Copyright (c) 2012 Julian Berman)
                 is read from the copy bundled in the `jsonschema` sdist (json/tests/).
  pydantic.json  pydantic_models.MODELS as the openai SDK's parse() sends them
                 (openai.lib._pydantic.to_strict_json_schema: additionalProperties false,
                 every property required).

Dropped suite cases: a schema that is a boolean or has no valid instance in its tests
(trivially false, unsatisfiable), a keyword outside the supported list (not, allOf,
if/then/else, contains, patternProperties, uniqueItems, multipleOf, ...), $id/$anchor or
a $ref that is not a local JSON pointer, a format outside date-time/date/time/uuid/email.

Usage: make_corpus.py [--suite DIR]   (DIR: the sdist's json/ folder; without it the sdist
of jsonschema==4.23.0 is fetched with `pip download --no-binary :all: --no-deps`).
pydantic.json needs the openai package (.venv-clients/bin/python make_corpus.py).
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
JSONSCHEMA_SDIST = "jsonschema==4.23.0"
SUPPORTED = {"type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems",
             "maxItems", "enum", "const", "anyOf", "oneOf", "$ref", "$defs", "minLength", "maxLength",
             "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}
ANNOTATIONS = {"title", "description", "default", "$comment", "$schema", "examples"}
FORMATS = {"date-time", "date", "time", "uuid", "email"}


def unsupported(schema, path="#"):
    """The first reason `schema` is outside the supported subset, or None."""
    if isinstance(schema, bool):
        return None
    if not isinstance(schema, dict):
        return f"{path} is not a schema"
    for key, value in schema.items():
        if key not in SUPPORTED | ANNOTATIONS:
            return f"{path}/{key}"
        if key == "$ref" and not (value == "#" or value.startswith("#/")):
            return f"{path}/$ref {value}"
        if key == "format" and value not in FORMATS:
            return f"{path}/format {value}"
        subs = []
        if key in ("properties", "$defs"):
            subs = [(f"{path}/{key}/{k}", v) for k, v in value.items()]
        elif key in ("items", "additionalProperties"):
            subs = [(f"{path}/{key}", value)]
        elif key in ("anyOf", "oneOf", "prefixItems"):
            subs = [(f"{path}/{key}/{i}", v) for i, v in enumerate(value)]
        for sub_path, sub in subs:
            reason = unsupported(sub, sub_path)
            if reason:
                return reason
    return None


def fetch_suite(tmp):
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:", "--no-deps",
                    "--dest", tmp, JSONSCHEMA_SDIST], check=True)
    archive = glob.glob(os.path.join(tmp, "jsonschema-*.tar.gz"))[0]
    with tarfile.open(archive) as tar:
        tar.extractall(tmp, filter="data")
    return glob.glob(os.path.join(tmp, "jsonschema-*", "json"))[0]


def suite_entries(suite):
    root = os.path.join(suite, "tests", "draft2020-12")
    files = sorted(glob.glob(os.path.join(root, "*.json"))) + sorted(glob.glob(os.path.join(root, "optional", "format", "*.json")))
    entries, dropped = [], 0
    for path in files:
        rel = os.path.relpath(path, suite)
        with open(path, encoding="utf-8") as f:
            cases = json.load(f)
        for index, case in enumerate(cases):
            schema = case["schema"]
            if isinstance(schema, bool) or unsupported(schema) or not any(t["valid"] for t in case["tests"]):
                dropped += 1
                continue
            if schema.get("$ref") and isinstance(schema.get("$defs", {}).get(schema["$ref"].split("/")[-1]), bool):
                dropped += 1  # a root that is a reference to `true`: trivially any JSON
                continue
            name = os.path.splitext(os.path.relpath(path, root))[0].replace(os.sep, "-")
            entries.append({"id": f"suite/{name}/{index}", "source": f"JSON-Schema-Test-Suite {rel} case {index}: {case['description']}",
                            "schema": schema})
    return entries, dropped


def pydantic_entries():
    sys.path.insert(0, HERE)
    from openai.lib._pydantic import to_strict_json_schema
    import pydantic_models
    return [{"id": f"pydantic/{m.__name__}", "source": f"pydantic_models.{m.__name__} via the openai SDK's strict schema",
             "schema": to_strict_json_schema(m)} for m in pydantic_models.MODELS]


def write(name, entries):
    with open(os.path.join(HERE, name), "w", encoding="utf-8") as f:
        json.dump(entries, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{name}: {len(entries)} entries")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", help="the json/ folder of the jsonschema sdist")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        entries, dropped = suite_entries(args.suite or fetch_suite(tmp))
    write("suite.json", entries)
    print(f"  ({dropped} suite cases dropped: outside the supported keywords or trivially true/false)")
    write("pydantic.json", pydantic_entries())


if __name__ == "__main__":
    sys.exit(main())
