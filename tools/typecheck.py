"""Type-check lib/distlab with mypy: the clean packages stay at zero, the rest only fall.

Usage:  python tools/typecheck.py            (what make lint runs; exit 1 on a regression)
        python tools/typecheck.py --write    (record today's counts as the baseline)

mypy (pinned in pyproject's test extras, configured in ``[tool.mypy]``) checks the whole
package; its errors are counted per top-level unit of ``distlab`` (``plan``, ``nccl``,
``viz``, ...). A unit in :data:`CLEAN` must have none; every other unit may have at most the
count recorded in ``tools/typecheck_baseline.json``, so the count can only fall. A unit whose
count fell below its baseline is named, so the baseline is lowered in the same change.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "tools" / "typecheck_baseline.json"
CLEAN = ("samplers", "nccl", "rccl", "health", "logs", "cli", "vocabulary", "gpus",
         "collective_library")
"""Units with no mypy error, kept so. The other pure packages (collectives, plan,
tensor_parallel, pipeline_parallel) join as their counts reach 0."""

_ERROR = re.compile(r"^lib/distlab/([^/:]+?)(?:\.py)?[/:].*: error: ")


def counts(output: str) -> Counter[str]:
    """Errors per unit in mypy's ``output`` (``lib/distlab/plan/x.py:3: error: ...``)."""
    return Counter(m[1] for line in output.splitlines() if (m := _ERROR.match(line)))


def run_mypy() -> tuple[int, str]:
    """mypy's exit status and output over ``lib/distlab``."""
    proc = subprocess.run([sys.executable, "-m", "mypy", "lib/distlab", "--no-error-summary",
                           "--hide-error-context", "--no-color-output"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    return proc.returncode, proc.stdout + proc.stderr


def problems(found: Counter[str], baseline: dict[str, int]) -> tuple[list[str], list[str]]:
    """``(regressions, improvements)``: units over their allowance, units under it."""
    worse, better = [], []
    for unit in sorted(set(found) | set(baseline) | set(CLEAN)):
        allowed = 0 if unit in CLEAN else baseline.get(unit, 0)
        n = found.get(unit, 0)
        if n > allowed:
            worse.append(f"{unit}: {n} mypy errors, allowed {allowed}")
        elif n < allowed:
            better.append(f"{unit}: {n} mypy errors, baseline {allowed}: lower it "
                          "(python tools/typecheck.py --write)")
    return worse, better


def main(argv: list[str]) -> int:
    """Run the check (or ``--write`` the baseline); returns the exit status."""
    status, output = run_mypy()
    if status not in (0, 1) or ("error:" not in output and status == 1):
        print(output, file=sys.stderr)
        print("typecheck: mypy did not run", file=sys.stderr)
        return 2
    found = counts(output)
    if argv == ["--write"]:
        BASELINE.write_text(json.dumps(dict(sorted(found.items())), indent=1) + "\n")
        print(f"typecheck: wrote {BASELINE.relative_to(ROOT)} ({sum(found.values())} errors)")
        return 0
    baseline = json.loads(BASELINE.read_text())
    worse, better = problems(found, baseline)
    for line in better:
        print(f"typecheck: {line}")
    if worse:
        print("\n".join(line for line in output.splitlines()
                        if any(line.startswith(f"lib/distlab/{w.split(':')[0]}") for w in worse)))
        print("typecheck: " + "; ".join(worse), file=sys.stderr)
        return 1
    print(f"typecheck: {sum(found.values())} mypy errors, none above the baseline; "
          f"{len(CLEAN)} units clean")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
