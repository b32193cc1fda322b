#!/usr/bin/env python3
"""The OpenAI-SDK client tests of `olmo2 serve` (ctest serve_clients.*; docs/architecture.md
§8, §10): one real server per run, driven with `openai.OpenAI(base_url=…, api_key=…)`.

  --layout single  test_completions, test_sampling_fields, test_chat, test_api
                   (label integration)
  --layout tp2|pp2 test_layouts: mpirun -np 2 olmo2 serve --tp 2 / --pp 2 (label mpi)
  --module NAME    only that module, e.g. test_activations_example (docs/guides/activations.md's
                   activations example, its own ctest entry)

Each module's unittest cases run against the one server (harness.Context); the server
must then stop with status 0 on SIGUSR1. Prints every case with ok/FAIL/ERROR; exit
status 0 only when all pass. Exits 77 (skipped) when no interpreter with the `openai`
package is found, unless CI is set (then 1).

Usage: sdk_suite.py --layout single|tp2|pp2 --olmo2 PATH --random-model PATH
                    --tokenizer PATH [--mpiexec PATH] [--python PATH] [--module NAME]
                    [-k PATTERN]
"""
import argparse
import os
import sys
import time
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

MODULES = {"single": ["test_completions", "test_sampling_fields", "test_chat", "test_api"],
           "tp2": ["test_layouts"], "pp2": ["test_layouts"]}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layout", choices=sorted(harness.LAYOUTS), required=True)
    p.add_argument("--olmo2", required=True)
    p.add_argument("--random-model", required=True)
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--mpiexec", default="mpirun")
    p.add_argument("--python", default="", help="an interpreter with the openai package")
    p.add_argument("--module", action="append", help="run this test module instead of the layout's")
    p.add_argument("-k", dest="patterns", action="append", help="only cases whose name contains this")
    args = p.parse_args()
    harness.ensure_sdk(args.python)
    import openai
    print(f"openai {openai.__version__} on Python {sys.version.split()[0]} ({sys.executable})")
    for name in ("olmo2", "random_model", "tokenizer"):
        setattr(args, name, os.path.abspath(getattr(args, name)))
        f = getattr(args, name)
        if not os.path.exists(f):
            print(f"FAILED: {f} does not exist (build the olmo2 and olmo2_random_model targets; "
                  f"scripts/setup.sh fetches the tokenizer)")
            return 1
    loader = unittest.TestLoader()
    if args.patterns:
        loader.testNamePatterns = [f"*{k}*" for k in args.patterns]
    suite = unittest.TestSuite(loader.loadTestsFromName(m) for m in args.module or MODULES[args.layout])
    t0 = time.time()
    harness.RUNNING = ctx = harness.Context(args)
    try:
        result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
    finally:
        status, log = ctx.close()
    ok = result.wasSuccessful() and status == 0
    if status != 0:
        print(f"FAIL: the server exited with status {status} after SIGUSR1; its log ends:\n{log}")
    elif not result.wasSuccessful():
        print(f"the server's log ends:\n{log}")
    # A case counts once however many of its subTests failed.
    failed = len({getattr(t, "test_case", t).id() for t, _ in result.failures + result.errors})
    print(f"{result.testsRun - failed - len(result.skipped)} passed, {failed} failed, "
          f"{len(result.skipped)} skipped ({args.layout}, {time.time() - t0:.1f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
