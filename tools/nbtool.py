"""Build and check the committed notebooks.

    python tools/nbtool.py build notebooks/01_samplers.ipynb [more.ipynb ...]
    python tools/nbtool.py clean notebooks/*.ipynb  # re-clean in place, executing nothing
    python tools/nbtool.py check                    # every notebook under notebooks/ is clean

``build`` executes each notebook in place on a fresh kernel with ``SMOKE=1`` (what nbval runs in
the test command), so output-checked cells store the outputs nbval will compare against; it then
cleans it. ``clean`` applies only that last step. Cleaning clears the outputs of cells tagged
``nbval-ignore-output`` (figures, widgets and timings would only bloat the diff), strips
volatile metadata (execution timings, widget state, editor state) and numbers the cell ids.
``check`` verifies that the committed notebooks are in that clean form; a test runs it.

The clean form is exactly what JupyterLab writes back, so a notebook opens unmodified (no dirty
dot on its tab): when JupyterLab connects a kernel it sets ``metadata.kernelspec`` to the kernel
spec's ``{name, display_name, language}`` and ``metadata.language_info`` to the kernel's own
``kernel_info`` reply, and any difference marks the notebook modified. Both are therefore stored
as this machine's ``python3`` kernel reports them (:func:`kernel_metadata` asks a real kernel).
That includes ``language_info.version``, the kernel's Python version (e.g. ``3.11.7``): JupyterLab
always writes it, so no stored form stays clean under every Python. The committed notebooks carry
one version, the one they were cleaned under; ``check`` requires every notebook to carry the same
one and everything else to match this machine's kernel, and a lab running another Python shows the
notebooks modified in that one field only.
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
KERNEL_NAME = "python3"
IGNORE_TAG = "nbval-ignore-output"
ALLOWED_TAGS = {IGNORE_TAG, "nbval-raises-exception", "nbval-check-output"}
KEEP_NOTEBOOK_METADATA = ("kernelspec", "language_info")
KEEP_CELL_METADATA = ("tags",)
#: The ``language_info`` field that differs between machines (the kernel's Python version).
VERSION_FIELD = "version"
#: nbformat version JupyterLab 4 writes (it upgrades older minors on load, which dirties them).
NBFORMAT = (4, 5)


@functools.cache
def kernel_metadata(kernel_name: str = KERNEL_NAME) -> dict[str, dict[str, Any]]:
    """The notebook metadata JupyterLab writes when it connects ``kernel_name`` on this machine.

    ``kernelspec`` is ``{name, display_name, language}`` from the installed kernel spec;
    ``language_info`` is the ``kernel_info`` reply of a kernel started here (and shut down).
    """
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name=kernel_name, stderr=subprocess.DEVNULL)
    try:
        reply = kc.kernel_info(reply=True, timeout=60)
        spec = km.kernel_spec
        if spec is None:
            raise RuntimeError(f"no kernel spec named {kernel_name!r} is installed")
        return {
            "kernelspec": {"name": kernel_name, "display_name": spec.display_name,
                           "language": spec.language},
            "language_info": dict(reply["content"]["language_info"]),
        }
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _clean(nb: nbformat.NotebookNode,
           kernel: dict[str, dict[str, Any]] | None = None) -> nbformat.NotebookNode:
    """``nb`` in the clean form (modified in place and returned); ``kernel`` is
    :func:`kernel_metadata` (asked for when not given)."""
    kernel = kernel if kernel is not None else kernel_metadata()
    nb.metadata = nbformat.from_dict({k: kernel[k] for k in KEEP_NOTEBOOK_METADATA})
    nb.nbformat, nb.nbformat_minor = NBFORMAT
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i:02d}"
        cell.metadata = {k: cell.metadata[k] for k in KEEP_CELL_METADATA if k in cell.metadata}
        if cell.cell_type != "code":
            continue
        if IGNORE_TAG in cell.metadata.get("tags", []):
            cell.outputs = []
            cell.execution_count = None
    return nb


def _kernel_problems(name: str, metadata: dict[str, Any],
                     kernel: dict[str, dict[str, Any]]) -> list[str]:
    """How ``metadata``'s kernelspec and language_info differ from what JupyterLab writes for
    ``kernel`` (the language version aside: see the module docstring)."""
    found = []
    hint = "(run: python tools/nbtool.py clean notebooks/*.ipynb)"
    spec = dict(metadata.get("kernelspec", {}))
    if spec != kernel["kernelspec"]:
        found.append(f"{name}: kernelspec {spec} is not what JupyterLab writes "
                     f"{kernel['kernelspec']} {hint}")
    info = dict(metadata.get("language_info", {}))
    want = kernel["language_info"]
    rest = {k: v for k, v in info.items() if k != VERSION_FIELD}
    if rest != {k: v for k, v in want.items() if k != VERSION_FIELD}:
        found.append(f"{name}: language_info {info} is not what JupyterLab writes {want} {hint}")
    elif not isinstance(info.get(VERSION_FIELD), str):
        found.append(f"{name}: language_info has no {VERSION_FIELD!r} {hint}")
    return found


def _written(nb: nbformat.NotebookNode) -> str:
    """The text ``nbformat.write`` (what JupyterLab's server saves with) puts in a file."""
    text = nbformat.writes(nb)
    return text if text.endswith("\n") else text + "\n"


def problems(path: Path, kernel: dict[str, dict[str, Any]] | None = None) -> list[str]:
    """What keeps a committed notebook from being clean (empty list when it is clean);
    ``kernel`` is :func:`kernel_metadata` (asked for when not given)."""
    kernel = kernel if kernel is not None else kernel_metadata()
    text = path.read_text(encoding="utf-8")
    nb = nbformat.reads(text, as_version=nbformat.NO_CONVERT)
    found: list[str] = []
    if (nb.nbformat, nb.nbformat_minor) != NBFORMAT:
        found.append(f"{path.name}: nbformat {nb.nbformat}.{nb.nbformat_minor}, not "
                     f"{NBFORMAT[0]}.{NBFORMAT[1]} (what JupyterLab writes)")
    elif text != _written(nb):
        found.append(f"{path.name}: the file is not what nbformat writes (indent, key order, "
                     "trailing newline, transient metadata): JupyterLab's save would rewrite it")
    extra = set(nb.metadata) - set(KEEP_NOTEBOOK_METADATA)
    if extra:
        found.append(f"{path.name}: volatile notebook metadata {sorted(extra)}")
    found += _kernel_problems(path.name, nb.metadata, kernel)
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


def version_problems(paths: list[Path]) -> list[str]:
    """One Python version for the committed set: a message when ``paths`` store more than one
    ``language_info.version`` (some were cleaned under another Python)."""
    versions: dict[str, list[str]] = {}
    for p in paths:
        info = nbformat.read(p, as_version=nbformat.NO_CONVERT).metadata.get("language_info", {})
        versions.setdefault(str(info.get(VERSION_FIELD)), []).append(p.name)
    if len(versions) <= 1:
        return []
    return [f"notebooks store different Python versions {versions}: clean them all under one "
            "Python (python tools/nbtool.py clean notebooks/*.ipynb)"]


def clean(path: Path) -> None:
    """Rewrite ``path`` in the clean form without executing anything."""
    nb = nbformat.read(path, as_version=nbformat.NO_CONVERT)
    nbformat.write(_clean(nb), path)
    print(f"cleaned {path}")


def build(path: Path, timeout: int = 900) -> None:
    """Execute ``path`` in place with SMOKE=1 on a fresh kernel, then clean it."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    os.environ["SMOKE"] = "1"
    client = NotebookClient(nb, timeout=timeout, kernel_name=KERNEL_NAME,
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
    c = sub.add_parser("clean", help="clean in place without executing")
    c.add_argument("paths", nargs="+", type=Path)
    k = sub.add_parser("check", help="verify every notebook is clean")
    k.add_argument("paths", nargs="*", type=Path,
                   help="notebooks to check (default: every notebook under notebooks/)")
    args = parser.parse_args(argv)
    if args.cmd in ("build", "clean"):
        for p in args.paths:
            (build if args.cmd == "build" else clean)(p)
        return 0
    paths = args.paths or sorted(NOTEBOOKS.glob("*.ipynb"))
    found = [msg for p in paths for msg in problems(p)] + version_problems(paths)
    print("\n".join(found) if found else "notebooks clean")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
