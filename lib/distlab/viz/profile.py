"""Figures and tables of profile folders (notebook 07); they read :mod:`distlab.profile.load`.

Our measurements are drawn as lines with small markers; published reference points (from
:func:`distlab.profile.load.published`) as large hollow black-edged markers labelled
``published: ...`` so the two never mix. Sizes in bytes, bandwidth in GB/s (1e9 B/s).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ipywidgets as w

from distlab._checks import check_instance, check_int
from distlab.bench.ddp import COLUMNS as DDP_COLUMNS
from distlab.bench.ddp import OVERLAP_DEFINITION
from distlab.collectives.algorithms.registry import BUILTIN, DEFAULT_ALGORITHM
from distlab.links import link_from_pcie
from distlab.profile.expected import MODEL_MIN_BYTES
from distlab.profile.load import Profile, list_profiles, load_profile, published
from distlab.report.table import Column, format_table
from distlab.transfers.paths import PIN_PATHS
from distlab.viz.figure import new_figure
from distlab.viz.palette import colour
from distlab.vocabulary import ErrorSummary, busbw_factor, gb_per_s, size_in

__all__ = ["DDP_COLOURS", "RERUN_HINT", "ProfileChoice", "collectives_figure", "compare_figure",
           "ddp_figure", "ddp_lines", "env_lines", "error_summary", "error_table", "has",
           "lacks",
           "link_peak_gbps", "missing_lines", "transfers_figure"]

_PUBLISHED_MARKERS = ("D", "s", "^", "v", "P", "X")


#: What :func:`has` can ask about besides a part: the folder's Chrome trace.
TRACE = "trace"


def lacks(profile: Profile, what: str) -> str | None:
    """Why ``profile`` has no usable ``what`` (a part name such as ``"collectives"``, or
    :data:`TRACE`), in one line; None when it has it. A part that ran but holds no allreduce
    run (world size 2 or more) lacks ``"collectives"`` too."""
    check_instance("profile", profile, Profile)
    check_instance("what", what, str)
    if what == TRACE:
        return None if (profile.path / "trace.json").is_file() else \
            f"{profile.name} has no trace.json"
    if profile.part(what) is not None:
        if what == "collectives" and not profile.allreduce_runs():
            return f"{profile.name}: its collectives part holds no allreduce of 2 or more ranks"
        return None
    entry = profile.index.get("parts", {}).get(what)
    if entry is None:
        return f"{profile.name} has no {what} part (not requested)"
    status = entry.get("status", "absent")
    if status == "ok":   # the index names a file the folder does not hold (cut short, copied)
        status = f"{entry.get('file', what + '.json')} missing from the folder"
    reason = entry.get("reason") or profile.index.get("stopped") or ""
    return f"{profile.name} has no {what} part ({status}{': ' + reason if reason else ''})"


def has(profile: Profile, what: str) -> bool:
    """Whether ``profile`` has ``what`` (see :func:`lacks`); when not, prints the one line
    that says what it lacks and why, so a notebook cell goes on with a reason."""
    why = lacks(profile, what)
    if why is not None:
        print(f"{why}: nothing to show here")
    return why is None


def missing_lines(profile: Profile) -> list[str]:
    """One line per part and file an incomplete ``profile`` lacks (empty for a complete one):
    what a reader of the chosen profile will not see."""
    check_instance("profile", profile, Profile)
    lines = [why for name in profile.index.get("parts", {})
             if (why := lacks(profile, name)) is not None
             and profile.index["parts"][name].get("status") != "skipped"]
    if (why := lacks(profile, TRACE)) is not None:
        lines.append(why)
    if not profile.complete:
        stopped = profile.index.get("stopped")
        lines.insert(0, f"{profile.name} is INCOMPLETE"
                        + (f" ({stopped})" if stopped else "") + ": the cells below say what "
                        "each one lacks and go on")
    return lines


def env_lines(profile: Profile) -> list[str]:
    """The env part as aligned text lines (deterministic for a committed profile)."""
    check_instance("profile", profile, Profile)
    env = profile.part("env")
    if env is None:
        return [lacks(profile, "env") or "env: not in this profile"]
    f = env["facts"]
    mem = f"{size_in(f['memory_bytes'], 'GiB', '.1f')}" if f.get("memory_bytes") else "unknown"
    out = [f"profile       {profile.name} ({'complete' if profile.complete else 'INCOMPLETE'})",
           f"cpu           {f['cpu_model']}, {f['cpu_cores']} cores, {mem} RAM",
           f"torch         {f['torch']}",
           f"cuda runtime  {f['cuda_runtime'] or 'none'}",
           f"nccl          {f['nccl'] or 'none'}",
           f"driver        {f['driver'] or 'none'}"]
    if f["gpus"]:
        out += [f"gpu {g['index']:<9} {g['name']}, {size_in(g['memory_bytes'], 'GiB', '.1f')}, "
                f"sm {g['capability']}" for g in f["gpus"]]
    else:
        out.append("gpu           none")
    out += [f"pcie          GPU {ln.get('gpu')} Gen{ln.get('gen')} x{ln.get('width')} "
            f"({ln.get('source')})" for ln in f["pcie_links"]]
    if f.get("gpu_topology"):
        out += ["topology (nvidia-smi topo -m):", *f["gpu_topology"].splitlines()]
    out += [f"note          {n}" for n in f["notes"]]
    return out


def link_peak_gbps(profile: Profile) -> tuple[str, float] | None:
    """``(label, GB/s per direction)`` of GPU 0's PCIe link in this profile, or None."""
    env = profile.part("env")
    links = env["facts"]["pcie_links"] if env else []
    if not links or not links[0].get("gen") or not links[0].get("width"):
        return None
    try:
        link = link_from_pcie(int(links[0]["gen"]), int(links[0]["width"]))
    except ValueError:
        return None
    return link.name, link.gbps


def transfers_figure(profile: Profile, *, show_published: bool = True) -> Any:
    """GB/s against size per copy path (first measured device), the link peak when known, and
    published nvbandwidth points."""
    check_instance("profile", profile, Profile)
    fig = new_figure(figsize=(9.4, 6.0))
    ax = fig.add_subplot()
    part = profile.part("transfers")
    if part is not None and part["devices"]:
        rows = part["devices"][0]["rows"]
        curves: dict[str, list[tuple[int, float]]] = {}
        for r in rows:
            if r["gbps"] is not None and r["path"] not in PIN_PATHS:  # pins: times, not GB/s
                curves.setdefault(f"{r['path']}/{r['memory']}", []).append((r["nbytes"], r["gbps"]))
        for key, pts in curves.items():
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label=f"ours: {key}")
    peak = link_peak_gbps(profile)
    if peak is not None:
        ax.axhline(peak[1], color="k", ls="--", lw=1, label=f"link peak {peak[0]}")
    if show_published:
        _published_transfers(ax)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("bytes per copy")
    ax.set_ylabel("GB/s (1e9 B/s)")
    ax.set_title(f"transfers: {profile.label()}")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncols=2,
              borderaxespad=0.0)   # below the axes: never over a curve
    return fig


def _published_transfers(ax: Any) -> None:
    for i, p in enumerate(published()["transfers"]):
        label = f"published: {p['system']} {p['tool'].split()[-1]}"
        m = _PUBLISHED_MARKERS[i % len(_PUBLISHED_MARKERS)]
        if p["nbytes"] is not None:
            ax.plot([p["nbytes"]], [p["gbps"]], m, ms=9, mfc="none", mec="k", label=label)
        else:  # buffer size not stated in the source: at the right edge, as a level
            ax.plot([1.0], [p["gbps"]], m, ms=9, mfc="none", mec="k",
                    transform=ax.get_yaxis_transform(), clip_on=False,
                    label=label + " (size not stated)")


def _run(profile: Profile, run: int) -> dict[str, Any] | None:
    runs = profile.allreduce_runs()
    if not runs:
        return None
    check_int("run", run, minimum=0, maximum=len(runs) - 1)
    return runs[run]


def collectives_figure(profile: Profile, run: int = 0, *, show_published: bool = True) -> Any:
    """Left: busbw per algorithm against size (ours solid, the model's busbw dashed, published
    nccl-tests points hollow). Right: model error% per algorithm and size."""
    check_instance("profile", profile, Profile)
    fig = new_figure(figsize=(9.4, 4.4))
    ax, ax_err = fig.subplots(1, 2)
    r = _run(profile, run)
    if r is not None:
        n = r["world_size"]
        by: dict[str, list[dict[str, Any]]] = {}
        for row in r["rows"]:
            by.setdefault(row["algorithm"], []).append(row)
        for algo, rows in by.items():
            rows.sort(key=lambda x: x["nbytes"])
            sizes = [x["nbytes"] for x in rows]
            line, = ax.plot(sizes, [x["busbw_gbps"] for x in rows], marker=".",
                            color=colour(algo), label=f"ours: {algo}")
            pred = [(x["nbytes"], gb_per_s(x["nbytes"], x["predicted_us"] * 1e-6)
                     * busbw_factor("all_reduce", n)) for x in rows if x["predicted_us"]]
            if pred:
                ax.plot(*zip(*pred, strict=True), ls="--", color=line.get_color(), lw=1)
                errs = [(x["nbytes"], x["error_pct"]) for x in rows if x["error_pct"] is not None]
                ax_err.plot(*zip(*errs, strict=True), marker="o", color=line.get_color(),
                            label=algo)
        ax.set_title(f"{r['backend']} ws{n}: busbw (dashed: model)")
    if show_published:
        for i, (system, pts) in enumerate(_published_allreduce().items()):
            ax.plot([p["nbytes"] for p in pts], [p["busbw_gbps"] for p in pts],
                    _PUBLISHED_MARKERS[i % len(_PUBLISHED_MARKERS)], ms=9, mfc="none", mec="k",
                    label=f"published: {system} (nccl-tests)")
    for a in (ax, ax_err):
        a.set_xscale("log", base=2)
        a.set_xlabel("message bytes")
    ax.set_yscale("log")
    ax.set_ylabel("busbw GB/s")
    ax_err.axhline(0, color="k", lw=0.8)
    ax_err.set_ylabel("error % = (measured - model) / model")
    ax_err.set_title("model error")
    if ax.lines:   # below the panels: one legend, never over a curve
        fig.legend(handles=ax.get_legend_handles_labels()[0], fontsize=7,
                   loc="outside lower center", ncols=3)
    return fig


def _published_allreduce() -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for p in published()["allreduce"]:
        out.setdefault(f"{p['system']}, ws{p['world_size']}", []).append(p)
    return out


ERROR_COLUMNS = (Column("algorithm", "algorithm", width=19), Column("size(B)", "nbytes", width=10),
                 Column("time(us)", "time_us", ".1f", width=10),
                 Column("predicted", "predicted_us", ".1f", width=10),
                 Column("error%", "error_pct", "+.1f", width=7))
DDP_LINE_COLUMNS = tuple(c for c in DDP_COLUMNS
                         if c.key in ("variant", "bucket_cap_mb", "step_s", "exposed_s",
                                      "overlap_fraction"))


def _error_rows(r: dict[str, Any], min_bytes: int) -> list[dict[str, Any]]:
    return sorted((x for x in r["rows"] if x["predicted_us"] is not None
                   and x["error_pct"] is not None and x["nbytes"] >= min_bytes),
                  key=lambda x: (x["algorithm"], x["nbytes"]))


def error_summary(profile: Profile, run: int = 0, *,
                  min_bytes: int = MODEL_MIN_BYTES) -> tuple[float, int, list[str]] | None:
    """The median ``|error%|`` :func:`error_table` prints, over how many rows, of which
    algorithms: the errors stored with the rows (each row's median time against the
    prediction of the same run), every algorithm with a prediction. None without rows."""
    r = _run(profile, run)
    rows = _error_rows(r, min_bytes) if r is not None else []
    if not rows:
        return None
    return (ErrorSummary.of(x["error_pct"] for x in rows).median, len(rows),
            list(dict.fromkeys(x["algorithm"] for x in rows)))


def error_table(profile: Profile, run: int = 0, *, min_bytes: int = MODEL_MIN_BYTES) -> list[str]:
    """Text rows: per algorithm and size >= ``min_bytes``, measured, predicted (us) and error%."""
    r = _run(profile, run)
    if r is None:
        return ["collectives: not in this profile"]
    rows = _error_rows(r, min_bytes)
    lines = format_table(rows, ERROR_COLUMNS).splitlines()
    errs = ErrorSummary.of(x["error_pct"] for x in rows)
    if errs.n:
        lines.append(f"median |error| {errs.median:.1f}%, max {errs.max:.1f}% over {errs.n} rows")
    return lines


def ddp_lines(profile: Profile) -> list[str]:
    """DDP rows as text: variant, cap, step and exposed-communication ms, overlap fraction."""
    part = profile.part("ddp")
    if part is None:
        return ["ddp: not in this profile"]
    return format_table(part["rows"], DDP_LINE_COLUMNS).splitlines()


#: One colour per DDP variant in :func:`ddp_figure` (others take the next cycle entries).
#: ``naive`` is also an allreduce algorithm's name, so it takes the palette's colour of it.
DDP_COLOURS = {"naive": colour("naive"), "no-overlap": "C0", "overlap": "C2", "torch": "C1"}


def _ddp_groups(rows: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """Rows grouped as the figure draws them, in order of appearance: one group per bucket cap
    (``cap N MB``), and one per variant that has no cap (``naive``: each parameter alone)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        cap = r["bucket_cap_mb"]
        key = r["variant"] if cap is None else f"cap {cap:g} MB"
        groups.setdefault(key, []).append(r)
    return list(groups.items())


def ddp_figure(profile: Profile) -> Any:
    """Step time per DDP variant, grouped by bucket cap, one colour per variant: the hatched
    bottom of a bar is the exposed communication (backward minus the no-communication backward),
    the number above it the row's overlap (:data:`distlab.bench.ddp.OVERLAP_DEFINITION`, also
    written in the title). A profile without a ddp part gets empty axes that say so (with the
    part's status). Milliseconds."""
    check_instance("profile", profile, Profile)
    fig = new_figure(figsize=(9.4, 4.4))
    ax = fig.add_subplot()
    part = profile.part("ddp")
    title = f"DDP: {profile.label()}"
    if part is not None:
        groups = _ddp_groups(part["rows"])
        colours = dict(DDP_COLOURS)
        for r in part["rows"]:
            colours.setdefault(r["variant"], f"C{3 + len(colours) - len(DDP_COLOURS)}")
        width = 0.8 / max(len(g) for _, g in groups)
        top = max(r["step_s"] for r in part["rows"]) * 1e3
        labelled: set[str] = set()
        for gi, (_, rows) in enumerate(groups):
            for j, r in enumerate(rows):
                x = gi + (j - (len(rows) - 1) / 2) * width
                step, exposed = r["step_s"] * 1e3, (r["exposed_s"] or 0.0) * 1e3
                c = colours[r["variant"]]
                ax.bar(x, step, width * 0.92, color=c, alpha=0.45,
                       label=r["variant"] if r["variant"] not in labelled else None)
                labelled.add(r["variant"])
                ax.bar(x, exposed, width * 0.92, color=c, hatch="///", edgecolor="k",
                       linewidth=0.5)
                if r.get("overlap_fraction") is not None:
                    ax.text(x, step + 0.01 * top, f"{r['overlap_fraction']:.2f}", ha="center",
                            va="bottom", fontsize=8)
        ax.bar(0, 0, 0, color="w", hatch="///", edgecolor="k", linewidth=0.5,
               label="exposed communication")
        ax.set_xticks(range(len(groups)), [k for k, _ in groups])
        ax.set_ylim(0, top * 1.12)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        title += f"\nnumber above a bar: {OVERLAP_DEFINITION}"
    else:   # say why the axes are empty, as ddp_lines does
        status = profile.index.get("parts", {}).get("ddp", {}).get("status", "absent")
        ax.text(0.5, 0.5, f"ddp: not in this profile ({status})", ha="center", va="center",
                transform=ax.transAxes)
    ax.set_ylabel("ms per step")
    ax.set_title(title, fontsize=10)
    return fig


def compare_figure(a: Profile, b: Profile) -> Any:
    """Two profiles side by side: builtin and ring busbw (first run of each) and the best copy
    path per size; published points stay out of this figure."""
    check_instance("a", a, Profile)
    check_instance("b", b, Profile)
    fig = new_figure(figsize=(9.4, 4.6))
    ax_c, ax_t = fig.subplots(1, 2)
    for prof, ls in ((a, "-"), (b, "--")):
        r = _run(prof, 0)
        if r is not None:
            for algo in (BUILTIN, DEFAULT_ALGORITHM["all_reduce"]):
                pts = sorted((x["nbytes"], x["busbw_gbps"]) for x in r["rows"]
                             if x["algorithm"] == algo)
                if pts:
                    ax_c.plot(*zip(*pts, strict=True), ls=ls, marker=".", color=colour(algo),
                              label=f"{prof.name}: {r['backend']} ws{r['world_size']} {algo}")
        t = prof.part("transfers")
        if t is not None and t["devices"]:
            best: dict[int, float] = {}
            for x in t["devices"][0]["rows"]:
                if x["gbps"] is not None and x["path"] not in ("numpy_copyto", *PIN_PATHS):
                    best[x["nbytes"]] = max(best.get(x["nbytes"], 0.0), x["gbps"])
            if best:
                ax_t.plot(*zip(*sorted(best.items()), strict=True), ls=ls, marker=".",
                          color="0.3", label=f"{prof.name}: best copy path")
    for ax, title, ylabel in ((ax_c, "allreduce busbw", "busbw GB/s"),
                              (ax_t, "transfers", "GB/s")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("bytes")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        if ax.lines:
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2),
                      borderaxespad=0.0)
    return fig


RERUN_HINT = "run this cell and all below (Run > Run Selected Cell and All Below)"
"""What the picker tells a reader to do after picking: the cells below read the choice when run."""


class ProfileChoice:
    """The one choice of profile a notebook reads: a dropdown of the profile folders under
    ``root`` (starting at ``chosen``, e.g. :func:`distlab.profile.load.choose_profile`'s pick,
    with ``why`` its one-line reason) and a path box for any other folder (Enter).

    ``profile`` is the current choice; every cell that reads a profile starts with
    ``prof = choice.use()``, which prints ``profile: <name>`` and returns it, so each cell says
    which profile it drew. Picking does not redraw cells that already ran: the picker's text
    says so (:data:`RERUN_HINT`). A folder that is not a profile: one line in the picker, the
    choice unchanged, nothing raised. ``widget`` shows the picker (showing it again shows the
    same state).
    """

    def __init__(self, root: str | Path, chosen: Profile, why: str) -> None:
        check_instance("chosen", chosen, Profile)
        self.root = Path(root)
        self.profile = chosen
        options = [(p.name, str(p)) for p in list_profiles(self.root)]
        if str(chosen.path) not in (v for _, v in options):
            options.append((chosen.name, str(chosen.path)))
        self.dropdown = w.Dropdown(options=options, value=str(chosen.path),
                                   description="profile")
        self.text = w.Text(placeholder="or any profile folder path (Enter)", description="path",
                           continuous_update=False)
        self.out = w.Output()
        self._say([f"reading {why}",
                   "Every cell below reads this choice. After picking another,", RERUN_HINT + "."])
        self.dropdown.observe(lambda ch: self.pick(ch["new"]), names="value")
        self.text.observe(lambda ch: self.pick(ch["new"]) if ch["new"].strip() else None,
                          names="value")
        self.widget = w.VBox([w.HBox([self.dropdown, self.text]), self.out])

    def _say(self, lines: list[str]) -> None:
        self.out.outputs = ()  # written through the model: works with or without a kernel
        self.out.append_stdout("\n".join(lines) + "\n")

    def pick(self, path: str | Path) -> Profile:
        """Make the profile folder ``path`` the choice (what the dropdown and path box call);
        returns the choice, unchanged when ``path`` is not a profile folder."""
        try:
            prof = load_profile(path)
        except ValueError as exc:
            self._say([str(exc), f"still reading {self.profile.name}"])
            return self.profile
        self.profile = prof
        self._say([f"reading {prof.label()}: picked here", *missing_lines(prof),
                   "The cells below still show the earlier choice. To redraw them for this one,",
                   RERUN_HINT + "."])
        return prof

    def use(self) -> Profile:
        """The current choice; prints ``profile: <name>`` so the cell says what it read."""
        print(f"profile: {self.profile.name}")
        return self.profile

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)
