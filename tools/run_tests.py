"""Run every distlab test in one pytest session and fail loudly when nothing ran.

Usage (what `make test` calls):  python tools/run_tests.py [extra pytest args]

pytest exits 5 when it collected no test; that is a failure here, never a silent pass.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# Behave like `python -m pytest` run from the repository root: the root is importable, so
# spawned child processes can import test modules (tests.test_x) by name in either case.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main(argv: list[str]) -> int:
    code = int(pytest.main(argv))
    if code == pytest.ExitCode.NO_TESTS_COLLECTED:
        print("run_tests: pytest collected no tests; failing instead of passing silently",
              file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
