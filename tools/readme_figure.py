"""Draw the README's picture: torch's DistributedSampler over 4 ranks, from distlab's own figure.

Usage:  python tools/readme_figure.py [OUT]     (default: docs/images/samplers.png)

The same figure notebook 01 draws (``distlab.viz.samplers.assignment_figure``) for 22 samples
on 4 ranks with ``drop_last``, at 100 dpi, so the README shows what the notebook shows.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from distlab.samplers import assign  # noqa: E402 (after the backend is chosen)
from distlab.viz.samplers import assignment_figure  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "images" / "samplers.png"


def main(argv: list[str]) -> int:
    """Write the PNG to ``argv[0]`` (or :data:`OUT`); returns the exit status."""
    out = Path(argv[0]) if argv else OUT
    out.parent.mkdir(parents=True, exist_ok=True)
    fig = assignment_figure(assign(22, 4, drop_last=True))
    fig.savefig(out, dpi=100, bbox_inches="tight")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
