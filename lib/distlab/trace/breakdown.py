"""Where one rank's step goes: GPU idle / compute / communication / memory, comm-compute overlap,
and the causes of GPU idle time, per rank and per ``ProfilerStep#N``.

Definitions (HTA 0.5.0's, so the numbers equal ``TraceAnalysis.get_temporal_breakdown``,
``get_comm_comp_overlap`` and ``get_idle_time_breakdown``; the tests check it on HTA's traces):

- *Events*: complete events with a ``cat`` and a ``dur`` (``cat != "Trace"``); times rounded to
  whole microseconds as HTA does (start up, end down). A *GPU event* has ``args.stream >= 0`` and
  ``args.correlation >= 0`` (or is named ``Event Sync``/``Context Sync``).
- *Which events* (whole trace): when the run has two or more ``ProfilerStep`` names, only CPU
  events that start before the last step's start, and GPU events launched by them (same
  ``correlation``): the last profiled step is left out, as HTA leaves it out. Per step ``N``:
  the GPU events whose launching CPU event starts inside ``ProfilerStep#N``.
- *Temporal breakdown*: over the GPU events (``stream != -1``), ``span`` = last end - first start;
  ``idle`` = span - length of their union; ``compute`` = union of computation kernels (name not
  NCCL, not Memcpy/Memset, not ``*Sync``); ``non_compute`` = span - compute - idle. distlab splits
  ``non_compute`` further (its own, HTA has no such split): ``communication`` (comm kernels not
  under compute), ``memory`` (memory kernels under neither), ``other`` (the rest).
- *Overlap*: |comm ∩ compute| / |comm|, unions of communication and computation kernels.
- *Idle time by stream* (HTA's): per stream, each kernel/memcpy/memset's gap after the previous
  one is ``host_wait`` when its launching runtime call started after the previous one ended,
  ``kernel_wait`` when shorter than ``consecutive_kernel_delay`` (30 us), else ``other``.
- *Idle causes* (distlab's own, per rank rather than per stream): every gap in which *no* GPU
  event runs is split into ``data_loader`` (under a DataLoader ``__next__`` span on the host),
  ``synchronize`` (under a ``cuda*Synchronize`` call, not the loader), ``host`` (the rest, when
  the kernel that ends the gap was launched after the gap began: the host was late) and ``other``.

A CPU-only trace (gloo) has no GPU events: its breakdown is the host's (:func:`host_breakdown`,
``basis="host"``), over the steps' span: ``communication`` = the union of gloo's ``gloo:*`` spans
(on its own threads; they include the wait for the last rank); ``compute`` = the step thread's CPU
ops outside communication and the DataLoader's ``__next__``; ``idle`` = the rest, its causes
``data_loader`` (under ``__next__``, the loader's own work included) and ``other`` (no op
recorded: Python between ops, a sleep); ``overlap`` = gloo spans under the step thread's ops.
Host traces have no ``host``/``synchronize`` causes and no memory kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distlab.trace.intervals import covered, intersection_length, merge
from distlab.trace.patterns import (
                                    DATA_LOADER,
                                    HTA_COMM_KERNEL,
                                    HTA_MEMORY_KERNEL,
                                    HTA_NOT_COMPUTE,
                                    STEP,
                                    SYNC,
                                    CommPattern,
                                    comm_regex,
)
from distlab.trace.torch_trace import RankTrace, Run

__all__ = ["Breakdown", "RankAnalysis", "analyze_rank", "analyze_run", "host_breakdown",
           "IDLE_KERNEL_CATS", "activity_intervals", "step_windows"]

IDLE_KERNEL_CATS = ("kernel", "Kernel", "gpu_memset", "Memset", "gpu_memcpy", "Memcpy",
                    "mtia_ccp_events")
"""Event categories HTA's idle-time breakdown looks at."""


@dataclass
class Breakdown:
    """One rank's (one step's) time, microseconds; ``basis`` is ``"gpu"`` or ``"host"``."""

    basis: str
    span_us: float
    idle_us: float
    compute_us: float
    communication_us: float
    memory_us: float
    other_us: float
    comm_total_us: float
    overlap_us: float
    idle_causes_us: dict[str, float]
    idle_by_stream: list[dict[str, Any]] = field(default_factory=list)
    hta_compute_us: float | None = None
    """Compute time by HTA's rule, where it differs from distlab's (kernels of :data:`COMM_PATTERNS`
    beyond ``nccl*Kernel``, e.g. DeepEP's, are compute to HTA); None where the two agree."""

    @property
    def non_compute_us(self) -> float:
        return self.span_us - self.compute_us - self.idle_us

    def pct(self, part: str) -> float:
        """``part`` (idle, compute, non_compute, communication, memory, other) in % of span."""
        v = self.non_compute_us if part == "non_compute" else getattr(self, f"{part}_us")
        return 100.0 * v / self.span_us if self.span_us > 0 else float("nan")

    @property
    def overlap_pct(self) -> float:
        """Communication time overlapped by compute, % of communication (NaN: no comm)."""
        return 100.0 * self.overlap_us / self.comm_total_us if self.comm_total_us > 0 \
            else float("nan")

    def as_dict(self) -> dict[str, Any]:
        return {"basis": self.basis, "span_us": self.span_us, "idle_us": self.idle_us,
                "compute_us": self.compute_us, "non_compute_us": self.non_compute_us,
                "communication_us": self.communication_us, "memory_us": self.memory_us,
                "other_us": self.other_us, "comm_total_us": self.comm_total_us,
                "overlap_pct": self.overlap_pct, "idle_causes_us": dict(self.idle_causes_us),
                "idle_by_stream": list(self.idle_by_stream),
                "hta_compute_us": self.hta_compute_us}


@dataclass
class RankAnalysis:
    """A rank's whole-trace breakdown, its steps and each step's breakdown (None: no events)."""

    rank: int
    steps: list[int]
    whole: Breakdown | None
    per_step: dict[int, Breakdown | None]
    missing: list[str]


def is_step_name(name: str) -> bool:
    """Whether ``name`` is a ``prof.step()`` span's, as HTA tells them (``ProfilerStep`` in it;
    :data:`~distlab.trace.patterns.STEP` reads the step's number)."""
    return "ProfilerStep" in name


class _Prepared:
    """HTA's view of one rank's events: valid rows, rounded times, GPU/CPU split, launchers."""

    def __init__(self, rt: RankTrace) -> None:
        self.rt = rt
        trace_cat = rt.cat_code("Trace")
        self.valid = ~np.isnan(rt.dur) & ~np.isnan(rt.ts) & (rt.cat >= 0) & (rt.cat != trace_cat)
        ts = np.where(self.valid, rt.ts, 0.0)
        self.ts = np.ceil(ts).astype(np.int64)
        self.end = np.floor(ts + np.where(self.valid, rt.dur, 0.0)).astype(np.int64)
        syncs = np.isin(rt.name, [rt.code("Event Sync"), rt.code("Context Sync")]) \
            & (rt.name >= 0)
        self.is_gpu = self.valid & (((rt.stream >= 0) & (rt.correlation >= 0)) | syncs)
        self.is_cpu = self.valid & ~self.is_gpu
        self.step_names = {rt.names[c] for c in np.unique(rt.name[self.valid])
                           if is_step_name(rt.names[c])}
        # launcher: the last CPU event (file order) with the GPU event's correlation
        cpu_c = self.is_cpu & (rt.correlation != -1)
        idx = np.flatnonzero(cpu_c)
        corr = rt.correlation[idx]
        order = np.lexsort((idx, corr))
        corr_s, idx_s = corr[order], idx[order]
        last = np.ones(len(corr_s), dtype=bool)
        last[:-1] = corr_s[1:] != corr_s[:-1]
        self.launch_corr, self.launch_idx = corr_s[last], idx_s[last]
        cpu_counts = np.unique(corr, return_counts=True)
        self.cpu_corr_counts = dict(zip(cpu_counts[0].tolist(), cpu_counts[1].tolist(),
                                        strict=True))

    def launcher(self, events: np.ndarray) -> np.ndarray:
        """Index of each GPU event's launching CPU event (-1: none)."""
        c = self.rt.correlation[events]
        k = np.searchsorted(self.launch_corr, c)
        k = np.minimum(k, max(len(self.launch_corr) - 1, 0))
        ok = (len(self.launch_corr) > 0) & (self.launch_corr[k] == c) if len(c) else \
            np.zeros(0, dtype=bool)
        return np.where(ok, self.launch_idx[k] if len(self.launch_corr) else -1, -1)


def _steps(p: _Prepared) -> dict[int, tuple[int, int]]:
    """``N -> (start, end)`` of the rank's ``ProfilerStep#N`` CPU spans (rounded times)."""
    rt = p.rt
    out: dict[int, tuple[int, int]] = {}
    for c, nm in enumerate(rt.names):
        m = STEP.match(nm)
        if m is None:
            continue
        for i in np.flatnonzero((rt.name == c) & p.is_cpu):
            out.setdefault(int(m.group(1)), (int(p.ts[i]), int(p.end[i])))
    return dict(sorted(out.items()))


def step_windows(rt: RankTrace) -> dict[int, tuple[int, int]]:
    """``N -> (start_us, end_us)`` of the rank's ``ProfilerStep#N`` spans (whole microseconds)."""
    return _steps(_Prepared(rt))


def _hta_selection(p: _Prepared, filter_steps: bool) -> tuple[np.ndarray, np.ndarray]:
    """(kept mask, multiplicity per event) as HTA's ``_filter_irrelevant_gpu_kernels``."""
    rt = p.rt
    if not filter_steps:
        return p.valid.copy(), np.ones(len(rt), dtype=np.int64)
    has_step = np.array([n in p.step_names for n in rt.names], dtype=bool)
    step = p.is_cpu & has_step[rt.name] if len(rt.names) else p.is_cpu & False
    kept_cpu = np.zeros(len(rt), dtype=bool)
    if step.any():
        last_start = p.ts[step].max()
        kept_cpu = p.is_cpu & (p.ts < last_start)
    corr, counts = np.unique(rt.correlation[kept_cpu], return_counts=True)
    k = np.searchsorted(corr, rt.correlation)
    k = np.minimum(k, max(len(corr) - 1, 0))
    hit = (corr[k] == rt.correlation) if len(corr) else np.zeros(len(rt), dtype=bool)
    gpu_kept = p.is_gpu & hit
    mult = np.ones(len(rt), dtype=np.int64)
    if len(corr):
        mult[gpu_kept] = counts[k[gpu_kept]]
    return kept_cpu | gpu_kept, mult


def _gpu_breakdown(p: _Prepared, events: np.ndarray, comm_rx: Any,
                   consecutive_kernel_delay: float, cpu_kept: np.ndarray) -> Breakdown | None:
    """``events``: indices of the GPU events to analyse (``stream != -1``); ``cpu_kept``: the
    CPU events a launcher may be (HTA's selection)."""
    rt = p.rt
    if len(events) == 0:
        return None
    ts, end = p.ts[events], p.end[events]
    ms, me = merge(ts, end)
    span = float(me[-1] - ms[0])
    idle = span - float(np.sum(me - ms))
    names = rt.name[events]
    hta_comm = np.array([HTA_COMM_KERNEL.match(n) is not None for n in rt.names])[names]
    our_comm = np.array([comm_rx.match(n) is not None for n in rt.names])[names] | hta_comm
    memory = np.array([HTA_MEMORY_KERNEL.match(n) is not None for n in rt.names])[names]
    computing = ~np.array([HTA_NOT_COMPUTE.match(n) is not None for n in rt.names])[names]
    comp = computing & ~memory & ~our_comm
    cs, ce = merge(ts[comp], end[comp])
    compute = float(np.sum(ce - cs))
    ks, ke = merge(ts[our_comm], end[our_comm])
    comm_total = float(np.sum(ke - ks))
    overlap = float(np.sum(covered(cs, ce, ks, ke)))
    comm_exposed = comm_total - overlap
    both = np.concatenate([cs, ks]), np.concatenate([ce, ke])
    bs, be = merge(*both)
    mem_s, mem_e = merge(ts[memory], end[memory])
    memory_us = float(np.sum(mem_e - mem_s)) - float(np.sum(covered(bs, be, mem_s, mem_e)))
    other = span - idle - compute - comm_exposed - memory_us
    causes = _idle_causes(p, events, ms, me)
    hta_comp = computing & ~memory & ~hta_comm
    hta_compute = None
    if (hta_comp != comp).any():
        hs, he = merge(ts[hta_comp], end[hta_comp])
        hta_compute = float(np.sum(he - hs))
    return Breakdown("gpu", span, idle, compute, comm_exposed, memory_us, max(other, 0.0),
                     comm_total, overlap, causes,
                     _idle_by_stream(p, events, consecutive_kernel_delay, cpu_kept), hta_compute)


def _host_spans(rt: RankTrace, p: _Prepared, rx: Any) -> tuple[np.ndarray, np.ndarray]:
    m = p.is_cpu & rt.mask_names(rx)
    return merge(p.ts[m], p.end[m])


def _idle_causes(p: _Prepared, events: np.ndarray, ms: np.ndarray,
                 me: np.ndarray) -> dict[str, float]:
    rt = p.rt
    out = {"host": 0.0, "data_loader": 0.0, "synchronize": 0.0, "other": 0.0}
    if len(ms) < 2:
        return out
    a, b = me[:-1].astype(np.float64), ms[1:].astype(np.float64)
    dl_s, dl_e = _host_spans(rt, p, DATA_LOADER)
    sy_m = p.is_cpu & (rt.mask_names(DATA_LOADER) | rt.mask_names(SYNC))
    us_s, us_e = merge(p.ts[sy_m], p.end[sy_m])
    dl = covered(dl_s, dl_e, a, b)
    sy = covered(us_s, us_e, a, b) - dl
    rest = (b - a) - dl - sy
    # the event that ends each gap: the earliest-starting event at ms[1:]
    ev_ts = p.ts[events]
    order = np.argsort(ev_ts, kind="stable")
    first = order[np.searchsorted(ev_ts[order], ms[1:], side="left")]
    launch = p.launcher(events[first])
    launch_ts = np.where(launch >= 0, p.ts[np.maximum(launch, 0)], -np.inf)
    late = launch_ts > a
    out["data_loader"] = float(dl.sum())
    out["synchronize"] = float(sy.sum())
    out["host"] = float(rest[late].sum())
    out["other"] = float(rest[~late].sum())
    return out


def _idle_by_stream(p: _Prepared, events: np.ndarray, delay: float,
                    cpu_kept: np.ndarray) -> list[dict[str, Any]]:
    """HTA's per-stream idle categories over ``events`` (multiplicity expanded by the caller)."""
    rt = p.rt
    cats = [rt.cat_code(c) for c in IDLE_KERNEL_CATS]
    ev = events[np.isin(rt.cat[events], [c for c in cats if c >= 0])]
    kept = np.zeros(len(rt), dtype=bool)
    kept[events] = True
    kept |= cpu_kept
    launch = p.launcher(ev)
    # HTA: no launcher -> index 0 (the file's first event) when that event is kept
    fallback = np.where(kept[0], float(p.ts[0]), np.nan) if len(rt) else np.nan
    li = np.maximum(launch, 0)
    runtime_ts = np.where(launch >= 0, np.where(kept[li], p.ts[li], np.nan), fallback)
    out: list[dict[str, Any]] = []
    for s in dict.fromkeys(rt.stream[ev].tolist()):
        sel = np.flatnonzero(rt.stream[ev] == s)
        order = sel[np.argsort(p.ts[ev[sel]], kind="stable")]
        ts, end = p.ts[ev[order]].astype(np.float64), p.end[ev[order]].astype(np.float64)
        rts = runtime_ts[order]
        if len(ts) < 2:
            continue
        gap = ts[1:] - end[:-1]
        host = rts[1:] > end[:-1]
        kwait = ~host & (gap < delay)
        other = ~host & ~kwait
        total = float(gap.sum())
        for cat, m in (("host_wait", host), ("kernel_wait", kwait), ("other", other)):
            us = float(gap[m].sum())
            out.append({"stream": int(s), "idle_category": cat, "idle_time_us": us,
                        "idle_time_ratio": us / total if total else float("nan"),
                        "intervals": int(m.sum())})
    return out


def host_breakdown(rt: RankTrace, window: tuple[float, float] | None = None,
                   comm: list[CommPattern] | None = None) -> Breakdown | None:
    """The host's breakdown of a CPU-only trace (see the module docstring), over ``window``
    (start, end microseconds; None: the whole trace)."""
    return _host_breakdown(_Prepared(rt), window, comm)


def _host_breakdown(p: _Prepared, window: tuple[float, float] | None,
                    comm: list[CommPattern] | None) -> Breakdown | None:
    rt = p.rt
    steps = _steps(p)
    step_m = p.is_cpu & rt.mask_names(STEP)
    main_tid = int(np.bincount(rt.tid[step_m] - rt.tid[step_m].min()).argmax()
                   + rt.tid[step_m].min()) if step_m.any() else None
    cpu_op = p.is_cpu & (rt.cat == rt.cat_code("cpu_op"))
    if main_tid is None and cpu_op.any():
        tids, tot = np.unique(rt.tid[cpu_op], return_counts=True)
        main_tid = int(tids[tot.argmax()])
    if main_tid is None:
        return None
    if window is None:
        on = p.is_cpu & (rt.tid == main_tid)
        if steps:
            window = (min(s for s, _ in steps.values()), max(e for _, e in steps.values()))
        elif on.any():
            window = (float(p.ts[on].min()), float(p.end[on].max()))
        else:
            return None
    w0, w1 = float(window[0]), float(window[1])
    span = w1 - w0
    if span <= 0:
        return None

    def clip(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s = np.clip(p.ts[m].astype(np.float64), w0, w1)
        e = np.clip(p.end[m].astype(np.float64), w0, w1)
        return merge(s, e)

    main = rt.tid == main_tid
    dl = clip(p.is_cpu & main & rt.mask_names(DATA_LOADER))
    comm_m = p.is_cpu & rt.mask_names(comm_regex(comm, "host"))
    cm = clip(comm_m)
    comp = clip(cpu_op & main)
    comm_total = float(np.sum(cm[1] - cm[0]))
    a = merge(np.concatenate([cm[0], dl[0]]), np.concatenate([cm[1], dl[1]]))
    dl_only = float(np.sum(a[1] - a[0])) - comm_total
    b = merge(np.concatenate([a[0], comp[0]]), np.concatenate([a[1], comp[1]]))
    compute = float(np.sum(b[1] - b[0])) - comm_total - dl_only
    nothing = span - float(np.sum(b[1] - b[0]))
    overlap = intersection_length(cm, comp)
    return Breakdown("host", span, dl_only + nothing, compute, comm_total, 0.0, 0.0, comm_total,
                     overlap, {"host": 0.0, "data_loader": dl_only, "synchronize": 0.0,
                               "other": nothing})


def analyze_rank(rt: RankTrace, *, filter_last_step: bool, comm: list[CommPattern] | None = None,
                 consecutive_kernel_delay: float = 30.0) -> RankAnalysis:
    """One rank's :class:`RankAnalysis` (``filter_last_step``: the run has >= 2 step names)."""
    return _analyze(_Prepared(rt), filter_last_step, comm, consecutive_kernel_delay)


def _analyze(p: _Prepared, filter_last_step: bool, comm: list[CommPattern] | None,
             consecutive_kernel_delay: float) -> RankAnalysis:
    rt = p.rt
    comm_rx = comm_regex(comm, "gpu")
    steps = _steps(p)
    missing: list[str] = []
    if not steps:
        missing.append("no ProfilerStep#N spans: the whole trace is one step (call prof.step() "
                       "each iteration)")
    gpu_any = (p.valid & (rt.stream != -1)).any()
    if not gpu_any:
        missing.append("no GPU kernels (a CPU-only trace): the host's breakdown only, no GPU "
                       "idle or kernel overlap")
        whole = _host_breakdown(p, None, comm)
        per = {n: _host_breakdown(p, (s, e), comm) for n, (s, e) in steps.items()}
        return RankAnalysis(rt.rank, list(steps), whole, per, missing)
    kept, mult = _hta_selection(p, filter_last_step)
    g = np.flatnonzero(kept & (rt.stream != -1))
    g = np.repeat(g, mult[g])
    whole = _gpu_breakdown(p, g, comm_rx, consecutive_kernel_delay, kept & p.is_cpu)
    per: dict[int, Breakdown | None] = {}
    if steps:
        all_g = np.flatnonzero(p.valid & (rt.stream != -1))
        launch = p.launcher(all_g)
        lts = np.where(launch >= 0, p.ts[np.maximum(launch, 0)], np.iinfo(np.int64).min)
        for n, (s, e) in steps.items():
            ev = all_g[(lts >= s) & (lts < e)]
            per[n] = _gpu_breakdown(p, ev, comm_rx, consecutive_kernel_delay, p.is_cpu)
    return RankAnalysis(rt.rank, list(steps), whole, per, missing)


def analyze_run(run: Run, *, comm: list[CommPattern] | None = None,
                consecutive_kernel_delay: float = 30.0) -> dict[int, RankAnalysis]:
    """Every rank's :class:`RankAnalysis`; the last step is left out of the whole-trace numbers
    when the run's traces hold two or more ``ProfilerStep`` names (HTA's rule)."""
    prepared = {r: _Prepared(rt) for r, rt in run.ranks.items()}   # once per rank
    names = set().union(*(p.step_names for p in prepared.values()))
    filt = len(names) >= 2
    return {r: _analyze(p, filt, comm, consecutive_kernel_delay) for r, p in prepared.items()}


def activity_intervals(rt: RankTrace, comm: list[CommPattern] | None = None
                       ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Merged ``[start, end)`` microsecond intervals (the trace's own ``ts``) of what the rank was
    doing, by kind: ``compute``, ``communication``, ``memory`` (GPU kernels; on a CPU-only trace
    the step thread's CPU ops and the ``gloo:*`` spans), ``data_loader`` and ``step`` (host)."""
    p = _Prepared(rt)
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    g = p.valid & (rt.stream != -1)
    if g.any():
        names = rt.name
        comm_rx = comm_regex(comm, "gpu")
        is_comm = np.array([comm_rx.match(n) is not None or HTA_COMM_KERNEL.match(n) is not None
                            for n in rt.names])[names]
        is_mem = np.array([HTA_MEMORY_KERNEL.match(n) is not None for n in rt.names])[names]
        is_comp = ~np.array([HTA_NOT_COMPUTE.match(n) is not None for n in rt.names])[names]
        for kind, m in (("compute", g & is_comp & ~is_mem & ~is_comm),
                        ("communication", g & is_comm), ("memory", g & is_mem)):
            out[kind] = merge(p.ts[m], p.end[m])
    else:
        step_m = p.is_cpu & rt.mask_names(STEP)
        tids = rt.tid[step_m] if step_m.any() else rt.tid[p.is_cpu]
        main = int(np.bincount(tids - tids.min()).argmax() + tids.min()) if len(tids) else -1
        cpu_op = p.is_cpu & (rt.cat == rt.cat_code("cpu_op")) & (rt.tid == main)
        out["compute"] = merge(p.ts[cpu_op], p.end[cpu_op])
        cm = p.is_cpu & rt.mask_names(comm_regex(comm, "host"))
        out["communication"] = merge(p.ts[cm], p.end[cm])
        out["memory"] = (np.zeros(0), np.zeros(0))
    dl = p.is_cpu & rt.mask_names(DATA_LOADER)
    out["data_loader"] = merge(p.ts[dl], p.end[dl])
    st = p.is_cpu & rt.mask_names(STEP)
    out["step"] = (p.ts[st], p.end[st])
    return out
