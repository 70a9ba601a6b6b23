"""Build and check the committed notebooks.

    python tools/nbtool.py build notebooks/01_samplers.ipynb [more.ipynb ...]
    python tools/nbtool.py check                    # every notebook under notebooks/ is clean

``build`` executes each notebook in place on a fresh kernel with ``SMOKE=1`` (what nbval runs in
the test command), so output-checked cells store the outputs nbval will compare against; it then
clears the outputs of cells tagged ``nbval-ignore-output`` (figures, widgets and timings would
only bloat the diff) and strips volatile metadata (execution timings, widget state, kernel
versions). ``check`` verifies that the committed notebooks are in that clean form; a test runs it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
IGNORE_TAG = "nbval-ignore-output"
ALLOWED_TAGS = {IGNORE_TAG, "nbval-raises-exception", "nbval-check-output"}
KEEP_NOTEBOOK_METADATA = ("kernelspec", "language_info")
KEEP_CELL_METADATA = ("tags",)


def _clean(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    nb.metadata = {k: nb.metadata[k] for k in KEEP_NOTEBOOK_METADATA if k in nb.metadata}
    if "language_info" in nb.metadata:
        nb.metadata["language_info"] = {"name": nb.metadata["language_info"].get("name", "python")}
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i:02d}"
        cell.metadata = {k: cell.metadata[k] for k in KEEP_CELL_METADATA if k in cell.metadata}
        if cell.cell_type != "code":
            continue
        if IGNORE_TAG in cell.metadata.get("tags", []):
            cell.outputs = []
            cell.execution_count = None
    return nb


def problems(path: Path) -> list[str]:
    """What keeps a committed notebook from being clean (empty list when it is clean)."""
    nb = nbformat.read(path, as_version=4)
    found: list[str] = []
    extra = set(nb.metadata) - set(KEEP_NOTEBOOK_METADATA)
    if extra:
        found.append(f"{path.name}: volatile notebook metadata {sorted(extra)}")
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    if not code_cells:
        found.append(f"{path.name}: no code cells")
    elif "SMOKE" not in code_cells[0].source:
        found.append(f"{path.name}: the first code cell must read the SMOKE switch")
    for i, cell in enumerate(nb.cells):
        extra_cell = set(cell.metadata) - set(KEEP_CELL_METADATA)
        if extra_cell:
            found.append(f"{path.name} cell {i}: volatile cell metadata {sorted(extra_cell)}")
        tags = set(cell.metadata.get("tags", []))
        if tags - ALLOWED_TAGS:
            found.append(f"{path.name} cell {i}: unknown tags {sorted(tags - ALLOWED_TAGS)}")
        if "nbval-skip" in cell.source or "NBVAL_SKIP" in cell.source:
            found.append(f"{path.name} cell {i}: skipped cells are not allowed")
        if cell.cell_type == "code" and IGNORE_TAG in tags and cell.outputs:
            found.append(f"{path.name} cell {i}: ignored-output cell has stored outputs")
        if cell.cell_type == "code" and IGNORE_TAG not in tags and cell.source.strip() \
                and cell.execution_count is None:
            found.append(f"{path.name} cell {i}: output-checked cell was never executed")
    return found


def build(path: Path, timeout: int = 900) -> None:
    """Execute ``path`` in place with SMOKE=1 on a fresh kernel, then clean it."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    os.environ["SMOKE"] = "1"
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    nbformat.write(_clean(nb), path)
    print(f"built {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="execute with SMOKE=1 and clean, in place")
    b.add_argument("paths", nargs="+", type=Path)
    sub.add_parser("check", help="verify every notebook is clean")
    args = parser.parse_args(argv)
    if args.cmd == "build":
        for p in args.paths:
            build(p)
        return 0
    found = [msg for p in sorted(NOTEBOOKS.glob("*.ipynb")) for msg in problems(p)]
    print("\n".join(found) if found else "notebooks clean")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
