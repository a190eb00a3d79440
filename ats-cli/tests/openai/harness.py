"""What every client test shares: the client for the server under test
(ATS_BASE_URL), and a runner that calls each test_* function of a module,
prints one line per test and a closing 'N passed, N failed' line, and
exits non-zero when one failed."""

import os
import sys
import traceback

import openai


def client():
    return openai.OpenAI(base_url=os.environ["ATS_BASE_URL"] + "/v1", api_key="unused", max_retries=0,
                         timeout=300)


def run(module_globals):
    tests = [(n, f) for n, f in module_globals.items() if n.startswith("test_") and callable(f)]
    only = os.environ.get("ATS_TESTS")
    if only:
        tests = [(n, f) for n, f in tests if n in only.split(",")]
    passed = failed = 0
    for name, f in tests:
        try:
            f()
            passed += 1
            print(f"ok   {name}", flush=True)
        except Exception:
            failed += 1
            print(f"FAIL {name}", flush=True)
            traceback.print_exc()
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed or not passed else 0)
