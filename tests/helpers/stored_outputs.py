"""nbval's check of a notebook, applied to outputs that JupyterLab produced.

nbval runs every code cell of a notebook in a kernel of its own and compares each cell's outputs
with the ones stored in the file. A real-browser test runs the same notebook (same ``SMOKE``
sizes, same environment) in JupyterLab; comparing the outputs it produced with the stored ones,
cell by cell, through nbval's own comparison (``IPyNbCell.compare_outputs``: the same keys
skipped, the same sanitizers, streams merged the same way) makes the second execution under nbval
redundant, and :mod:`helpers.notebook_owner` lets nbval leave such a notebook to its browser test.

The figure audit's checks (:mod:`helpers.figure_guard`: a figure shown only as text, a figure
made and never shown or whose texts collide, a printed line that wraps) run on the same outputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import nbformat
from nbval import plugin as nbval

from helpers.figure_guard import MAX_COLUMNS, bare_figure_texts, unshown_figure_lines, wide_lines

__all__ = ["SKIP_COMPARE", "differences_from_stored"]

#: The output keys nbval leaves out of its comparison when run without ``--nbdime`` (its
#: ``IPyNbFile.skip_compare``): metadata, tracebacks, counters, widget model ids and images.
SKIP_COMPARE = ("metadata", "traceback", "prompt_number", "output_type", "name",
                "execution_count", "application/vnd.jupyter.widget-view+json", "image/png",
                "image/jpeg")


class _Comparer:
    """What nbval's ``IPyNbCell.compare_outputs`` reads from its cell, and nothing else: the
    comparison itself (and its report of the first difference) is nbval's own code."""

    compare_outputs = nbval.IPyNbCell.compare_outputs
    format_output_compare = nbval.IPyNbCell.format_output_compare
    sanitize = nbval.IPyNbCell.sanitize

    def __init__(self, config: Any, patterns: Mapping[str, str]) -> None:
        self.parent = SimpleNamespace(skip_compare=SKIP_COMPARE, sanitize_patterns=patterns)
        self.colors = nbval.nocolors
        self.config = config
        self.ihook = config.hook
        self.comparison_traceback: list[str] = []


def _patterns(config: Any) -> dict[str, str]:
    """The sanitizers of this run (``--nbval-sanitize-with``), as nbval reads them."""
    path = getattr(config.option, "nbval_sanitize_with", None)
    return dict(nbval.get_sanitize_patterns(Path(path).read_text())) if path else {}


def _options(cell: Any) -> dict[str, Any]:
    """nbval's options of one stored cell (tags, then comment markers, as nbval orders them)."""
    options: dict[str, Any] = dict(nbval.find_metadata_tags(cell.metadata))
    options.update(dict(nbval.find_comment_markers(cell.source)))
    options.setdefault("check", True)
    return options


def differences_from_stored(config: Any, notebook: Path,
                            live: Sequence[Mapping[str, Any]]) -> list[str]:
    """What nbval and the figure audit would report for ``notebook`` run as ``live``.

    ``live`` holds one ``{"source": str, "outputs": [nbformat output dicts]}`` per code cell, in
    order, as JupyterLab's notebook model gives them after a Run All. Returns one message per
    failing cell (empty when nbval would pass every cell): a source that is not the stored one,
    outputs that differ where nbval compares them (cells tagged ``nbval-ignore-output`` are not
    compared), an error output, or a figure-audit finding.
    """
    stored = [c for c in nbformat.read(str(notebook), as_version=4).cells
              if c.cell_type == "code"]
    name = notebook.name
    if len(stored) != len(live):
        return [f"{name}: {len(live)} code cells ran in the browser, the file holds "
                f"{len(stored)}"]
    patterns = _patterns(config)
    found = []
    for index, (cell, ran) in enumerate(zip(stored, live, strict=True)):
        where = f"{name} Cell {index}"  # nbval's item name for the same cell
        if ran["source"] != cell.source:
            found.append(f"{where}: the browser ran other source than the file holds")
            continue
        options = _options(cell)
        if options.get("skip"):
            continue
        outputs = [nbformat.from_dict(dict(o)) for o in ran["outputs"]]
        errors = [o for o in outputs if o.get("output_type") == "error"]
        if errors and not options.get("check_exception"):
            found.append(f"{where}: {errors[0].get('ename')}: {errors[0].get('evalue')}")
            continue
        outputs = nbval.coalesce_streams(outputs)
        problems = ([f"shows {t!r} as text and no image/png" for t in bare_figure_texts(outputs)]
                    + unshown_figure_lines(outputs)
                    + [f"prints a line wider than {MAX_COLUMNS} characters: {line}"
                       for line in wide_lines(outputs)[:1]])
        found.extend(f"{where}: {p}" for p in problems)
        if cell.execution_count is None and cell.outputs:
            found.append(f"{where}: unrun reference cell has outputs")
            continue
        if not options["check"] or cell.execution_count is None:
            continue
        comparer = _Comparer(config, patterns)
        if not comparer.compare_outputs(outputs, nbval.coalesce_streams(cell.outputs)):
            found.append(f"{where}: cell outputs differ from the stored ones\n"
                         + "\n".join(comparer.comparison_traceback)
                         + f"\ncell source:\n{cell.source}")
    return found
