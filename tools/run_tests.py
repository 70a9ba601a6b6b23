"""Run every distlab test in one pytest session and fail loudly when nothing ran.

Usage (what `make test` calls):  python tools/run_tests.py [extra pytest args]

pytest exits 5 when it collected no test; that is a failure here, never a silent pass.
"""

from __future__ import annotations

import sys

import pytest


def main(argv: list[str]) -> int:
    code = int(pytest.main(argv))
    if code == pytest.ExitCode.NO_TESTS_COLLECTED:
        print("run_tests: pytest collected no tests; failing instead of passing silently",
              file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
