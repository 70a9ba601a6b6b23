"""FSDP's exposed all-gather per unit, read off a rank's profiler trace, beside the prefetch model.

How a unit is recognised: torch FSDP2 (``fully_shard``) wraps its work in ``record_function``
spans named ``FSDP::<what> (<module fqn>)`` (the root module's without the parenthesis):
``FSDP::all_gather (0)`` issues unit ``0``'s all-gather, ``FSDP::pre_forward (0)`` /
``FSDP::post_forward (0)`` enclose its forward, ``FSDP::pre_backward (0)`` starts its backward and
``FSDP::post_backward_reduce (0)`` issues its reduce-scatter; ``FSDP::backward_prefetch for 0``
(``forward_prefetch``) issues a gather ahead. A unit is a module with an ``FSDP::all_gather``
span. A trace without them has no FSDP section (:func:`run_fsdp_exposure` returns ``None``).
distlab's own ZeRO stage 3 (:mod:`distlab.zero.stage3`) records its units on a distlab timeline,
not as profiler spans, so its traces have no such section.

Per all-gather (one ``FSDP::all_gather`` span):

- its *transfer* is what ran the collective: on a CPU trace the ``gloo:*`` span of each
  ``c10d::`` op issued inside the annotation (the ``k``-th c10d op of the rank's trace runs as its
  ``k``-th gloo span, the first one starting at or after the op), on a GPU trace the
  communication kernels launched inside it (``correlation`` of the launches);
- *compute* is, on a CPU trace, the union of ``aten::`` ops on the threads that are not gloo's;
  on a GPU trace, the union of kernels that are neither communication nor memory copies/sets;
- *exposed* = transfer time not under compute; its *phase* is ``backward`` from the step's first
  ``FSDP::pre_backward`` on, else ``forward``.

Per unit and step: the forward compute inside ``[pre_forward end, post_forward start]`` and the
backward compute inside ``[pre_backward end, the unit's next post_backward_* start]``, each less
the windows of the other units nested in it; the reduce-scatter's transfer (the c10d op inside
``FSDP::post_backward_reduce``); and the optimizer step (``Optimizer.step#*``). Those, averaged
over the steps, are :class:`~distlab.zero.prefetch_model.UnitTimes` for
:func:`~distlab.zero.prefetch_model.simulate_step`, run with the prefetch depth the trace shows
per phase (the most ``FSDP::<phase>_prefetch`` spans inside one ``FSDP::pre_<phase>``); the
model's wait for unit ``k``'s gather is its predicted exposed time. The model issues every
collective on one queue that runs beside compute; where the measured exposure is far above the
model's, the gathers did not run beside compute (on gloo/CPU FSDP2 waits for a gather inside the
span that issues it).
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from distlab.trace.intervals import intersection_length, merge

__all__ = ["FSDP_SPAN", "FsdpExposure", "UnitExposure", "exposure_lines", "fsdp_exposure",
           "run_fsdp_exposure"]

FSDP_SPAN = re.compile(r"^FSDP::(all_gather|pre_forward|post_forward|pre_backward|"
                       r"post_backward_\w+|forward_prefetch|backward_prefetch)"
                       r"(?: \((?P<fqn>.*)\)| for (?P<target>.*))?$")
"""FSDP2's span names this module reads (``FSDP::all_gather_copy_out`` and the root's hooks are
not among them)."""
_STEP = re.compile(r"ProfilerStep\s*#\s*(\d+)")
_COMM_KERNEL = re.compile(r"(?i)nccl|rccl|AllGather|ReduceScatter|AllReduce|SendRecv")
_MEMORY_KERNEL = re.compile(r"(?i)^(Memcpy|Memset)")
ROOT = "(root)"
"""The name given to the root module's unit (whose FSDP spans carry no fqn)."""


@dataclass
class UnitExposure:
    """One unit, microseconds per step (mean over the steps): measured gather and exposed time per
    phase, compute, reduce-scatter, and the prefetch model's exposed time per phase."""

    unit: str
    forward_gather_us: float = 0.0
    forward_exposed_us: float = 0.0
    backward_gather_us: float = 0.0
    backward_exposed_us: float = 0.0
    forward_compute_us: float = 0.0
    backward_compute_us: float = 0.0
    reduce_scatter_us: float = 0.0
    model_forward_exposed_us: float | None = None
    model_backward_exposed_us: float | None = None

    @property
    def exposed_us(self) -> float:
        return self.forward_exposed_us + self.backward_exposed_us

    @property
    def gather_us(self) -> float:
        return self.forward_gather_us + self.backward_gather_us

    @property
    def model_exposed_us(self) -> float | None:
        if self.model_forward_exposed_us is None or self.model_backward_exposed_us is None:
            return None
        return self.model_forward_exposed_us + self.model_backward_exposed_us


@dataclass
class FsdpExposure:
    """One rank's FSDP units (forward order) and the model's step beside the measured one."""

    rank: int
    units: list[UnitExposure]
    steps: list[int | None]
    basis: str
    prefetch_forward: int
    prefetch_backward: int
    optimizer_us: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def exposed_us(self) -> float:
        return sum(u.exposed_us for u in self.units)

    @property
    def gather_us(self) -> float:
        return sum(u.gather_us for u in self.units)

    @property
    def model_exposed_us(self) -> float | None:
        vals = [u.model_exposed_us for u in self.units]
        return None if any(v is None for v in vals) else sum(vals)  # type: ignore[misc]

    def as_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "basis": self.basis,
                "steps": ["all" if s is None else s for s in self.steps],
                "prefetch_forward": self.prefetch_forward,
                "prefetch_backward": self.prefetch_backward, "optimizer_us": self.optimizer_us,
                "gather_us": self.gather_us, "exposed_us": self.exposed_us,
                "model_exposed_us": self.model_exposed_us,
                "units": [asdict(u) for u in self.units], "notes": self.notes}


@dataclass
class _Ev:
    name: str
    ts: float
    end: float
    tid: Any
    stream: int
    correlation: int


def _events(events: Iterable[Mapping[str, Any]]) -> list[_Ev]:
    out = []
    for e in events:
        if e.get("ph", "X") != "X" or e.get("dur") is None or e.get("ts") is None:
            continue
        a = e.get("args") or {}
        ts = float(e["ts"])
        out.append(_Ev(str(e.get("name", "")), ts, ts + float(e["dur"]), e.get("tid"),
                       int(a.get("stream", -1) if a.get("stream") is not None else -1),
                       int(a.get("correlation", -1) if a.get("correlation") is not None
                           else -1)))
    return sorted(out, key=lambda e: (e.ts, -e.end))


def _union(spans: Sequence[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
    if not spans:
        return np.zeros(0), np.zeros(0)
    return merge(np.array([s for s, _ in spans], dtype=float),
                 np.array([e for _, e in spans], dtype=float))


def _length(u: tuple[np.ndarray, np.ndarray]) -> float:
    return float(np.sum(u[1] - u[0]))


def _inside(e: _Ev, outer: _Ev) -> bool:
    return outer.tid == e.tid and outer.ts <= e.ts and e.end <= outer.end


def _minus(window: tuple[float, float], holes: Sequence[tuple[float, float]]
           ) -> tuple[np.ndarray, np.ndarray]:
    """``window`` less the union of ``holes``, as disjoint intervals."""
    s0, e0 = window
    hs, he = _union([(max(s0, a), min(e0, b)) for a, b in holes if b > s0 and a < e0])
    starts, ends, at = [], [], s0
    for a, b in zip(hs.tolist(), he.tolist(), strict=True):
        if a > at:
            starts.append(at)
            ends.append(a)
        at = max(at, b)
    if at < e0:
        starts.append(at)
        ends.append(e0)
    return np.array(starts, dtype=float), np.array(ends, dtype=float)


def _unit(m: re.Match[str]) -> str:
    name = m.group("fqn") if m.group("fqn") is not None else m.group("target")
    return name if name else ROOT


def fsdp_exposure(events: Iterable[Mapping[str, Any]], rank: int = 0) -> FsdpExposure | None:
    """One rank's FSDP units, exposed gathers and model (module docstring) from its Kineto-like
    events (dicts with ``name``, ``ph``, ``ts``, ``dur``, ``tid``, ``args`` with ``stream`` and
    ``correlation`` for GPU events); None when it holds no ``FSDP::all_gather`` span."""
    evs = _events(events)
    fsdp = [(e, m.group(1), _unit(m)) for e in evs if (m := FSDP_SPAN.match(e.name))]
    gathers = [(e, u) for e, what, u in fsdp if what == "all_gather"]
    if not gathers:
        return None
    gpu = any(e.stream >= 0 for e in evs)
    notes: list[str] = []
    steps = sorted((e.ts, e.end, int(m.group(1))) for e in evs if (m := _STEP.match(e.name)))

    def step_of(t: float) -> int | None:
        return next((n for s, x, n in steps if s <= t < x), None)

    # compute and transfers
    if gpu:
        comp = _union([(e.ts, e.end) for e in evs if e.stream >= 0
                       and not _COMM_KERNEL.search(e.name) and not _MEMORY_KERNEL.match(e.name)])
        kernels = {e.correlation: e for e in evs if e.stream >= 0 and e.correlation >= 0
                   and _COMM_KERNEL.search(e.name)}
        launches = [e for e in evs if e.stream < 0 and e.correlation in kernels]

        def transfers(outer: _Ev) -> list[tuple[float, float]]:
            ks = [kernels[e.correlation] for e in launches if _inside(e, outer)]
            return [(k.ts, k.end) for k in ks]
    else:
        gloo = [e for e in evs if e.name.startswith("gloo:")]
        gloo_tids = {e.tid for e in gloo}
        comp = _union([(e.ts, e.end) for e in evs
                       if e.name.startswith("aten::") and e.tid not in gloo_tids])
        ops = [e for e in evs if e.name.startswith("c10d::") and e.tid not in gloo_tids]
        ran: dict[int, _Ev] = {}
        k = 0
        for i, op in enumerate(ops):
            while k < len(gloo) and gloo[k].ts < op.ts:
                k += 1
            if k < len(gloo):
                ran[i] = gloo[k]
                k += 1
        if len(ran) < len(ops):
            notes.append(f"{len(ops) - len(ran)} c10d op(s) without a gloo span after them: "
                         "their transfer is not counted")

        def transfers(outer: _Ev) -> list[tuple[float, float]]:
            return [(ran[i].ts, ran[i].end) for i, op in enumerate(ops)
                    if i in ran and _inside(op, outer)]

    first_backward: dict[int | None, float] = {}
    for e, what, _ in fsdp:
        if what == "pre_backward":
            s = step_of(e.ts)
            first_backward[s] = min(first_backward.get(s, e.ts), e.ts)
    order = list(dict.fromkeys(u for _, u in gathers))
    step_ids = sorted({step_of(e.ts) for e, _ in gathers}, key=lambda s: -1 if s is None else s)
    acc: dict[tuple[str, str], float] = defaultdict(float)
    for e, u in gathers:
        s = step_of(e.ts)
        phase = "backward" if e.ts >= first_backward.get(s, float("inf")) else "forward"
        tr = _union(transfers(e))
        acc[(u, f"{phase}_gather_us")] += _length(tr)
        acc[(u, f"{phase}_exposed_us")] += max(0.0, _length(tr) - intersection_length(tr, comp))
    # compute windows per unit
    pre_f = [(e, u) for e, w, u in fsdp if w == "pre_forward"]
    post_f = [(e, u) for e, w, u in fsdp if w == "post_forward"]
    pre_b = [(e, u) for e, w, u in fsdp if w == "pre_backward"]
    post_b = [(e, u) for e, w, u in fsdp if w.startswith("post_backward_")]
    windows: dict[str, list[tuple[str, float, float]]] = {"forward": [], "backward": []}
    for phase, pres, posts in (("forward", pre_f, post_f), ("backward", pre_b, post_b)):
        for e, u in pres:
            end = next((p.ts for p, pu in posts if pu == u and p.ts >= e.end), None)
            if end is not None:
                windows[phase].append((u, e.end, end))
    for phase, ws in windows.items():
        for u, a, b in ws:
            holes = [(x, y) for v, x, y in ws if (v, x, y) != (u, a, b) and a <= x and y <= b]
            acc[(u, f"{phase}_compute_us")] += intersection_length(_minus((a, b), holes), comp)
    for e, w, u in fsdp:
        if w == "post_backward_reduce":
            acc[(u, "reduce_scatter_us")] += _length(_union(transfers(e)))
    n = max(1, len(step_ids))
    units = [UnitExposure(u, **{k: acc[(u, k)] / n for k in (
        "forward_gather_us", "forward_exposed_us", "backward_gather_us", "backward_exposed_us",
        "forward_compute_us", "backward_compute_us", "reduce_scatter_us")}) for u in order]
    opt = [e.end - e.ts for e in evs if e.name.startswith("Optimizer.step#")]
    out = FsdpExposure(rank, units, step_ids, "gpu" if gpu else "host",
                       _depth(fsdp, "forward"), _depth(fsdp, "backward"),
                       sum(opt) / n if opt else 0.0, notes)
    _model(out, gathers_per_phase={p: sum(1 for e, _ in gathers if (
        "backward" if e.ts >= first_backward.get(step_of(e.ts), float("inf")) else "forward")
        == p) for p in ("forward", "backward")})
    return out


def _depth(fsdp: Sequence[tuple[_Ev, str, str]], phase: str) -> int:
    """The most ``FSDP::<phase>_prefetch`` spans inside one ``FSDP::pre_<phase>`` span."""
    pres = [e for e, w, _ in fsdp if w == f"pre_{phase}"]
    pf = [e for e, w, _ in fsdp if w == f"{phase}_prefetch"]
    return max((sum(1 for p in pf if _inside(p, e)) for e in pres), default=0)


def _model(out: FsdpExposure, gathers_per_phase: Mapping[str, int]) -> None:
    """Fill in the prefetch model's exposed time per unit and phase."""
    from distlab.zero.prefetch_model import UnitTimes, simulate_step

    units = out.units

    def gather_s(u: UnitExposure) -> float:
        counts = [(u.forward_gather_us, 1), (u.backward_gather_us, 1)]
        vals = [g for g, _ in counts if g > 0]
        return (statistics.fmean(vals) if vals else 0.0) * 1e-6

    times = [UnitTimes(u.forward_compute_us * 1e-6, u.backward_compute_us * 1e-6, gather_s(u),
                       u.reduce_scatter_us * 1e-6) for u in units]
    if not gathers_per_phase.get("backward"):
        out.notes.append("no all-gather in a backward (no FSDP::pre_backward): the model's "
                         "backward gathers are not compared")
    for phase, depth in (("forward", out.prefetch_forward), ("backward", out.prefetch_backward)):
        sim = simulate_step(times, depth, out.optimizer_us * 1e-6)
        waits: dict[int, float] = defaultdict(float)
        for s in sim.spans:
            m = re.match(r"wait unit (\d+) \((\w+)\)$", s.name)
            if s.lane == "wait" and m and m.group(2) == phase:
                waits[int(m.group(1))] += (s.end - s.start) * 1e6
        for k, u in enumerate(units):
            value = waits.get(k, 0.0) if gathers_per_phase.get(phase) else 0.0
            setattr(u, f"model_{phase}_exposed_us", value)


def run_fsdp_exposure(run: Any) -> dict[int, FsdpExposure]:
    """:func:`fsdp_exposure` of every rank of a :class:`~distlab.trace.torch_trace.Run` that
    holds FSDP all-gathers (an empty dict, at the cost of one pass over the names, when none
    does)."""
    out = {}
    for r, rt in run.ranks.items():
        if not any(n.startswith("FSDP::all_gather") for n in rt.names):
            continue
        gpu = rt.has_gpu_events
        keep = np.array([bool(FSDP_SPAN.match(n) or _STEP.match(n)
                              or n.startswith(("c10d::", "gloo:", "Optimizer.step#"))
                              or (not gpu and n.startswith("aten::"))) for n in rt.names],
                        dtype=bool)
        sel = keep[rt.name] | ((rt.stream >= 0) | (rt.correlation >= 0) if gpu else False)
        idx = np.flatnonzero(sel & ~np.isnan(rt.dur) & ~np.isnan(rt.ts))
        events = [{"name": rt.names[rt.name[i]], "ph": "X", "ts": float(rt.ts[i]),
                   "dur": float(rt.dur[i]), "tid": int(rt.tid[i]),
                   "args": {"stream": int(rt.stream[i]), "correlation": int(rt.correlation[i])}}
                  for i in idx]
        got = fsdp_exposure(events, r)
        if got is not None:
            out[r] = got
    return out


def _ms(us: float | None) -> str:
    return "-" if us is None else f"{us / 1000:.2f}"


def exposure_lines(found: Mapping[int, FsdpExposure], rank: int | None = None) -> list[str]:
    """The report's FSDP section (none without FSDP all-gathers): per rank a line of totals, then
    per unit the forward and backward gathers, exposed and the model's exposed, ms per step."""
    if not found:
        return []
    lines = ["## FSDP all-gathers (FSDP::all_gather spans), ms per step; exposed: not under "
             "compute;", "  model: distlab.zero.prefetch_model on the measured times"]
    for r, fx in found.items():
        if rank is not None and r != rank:
            continue
        lines.append(f"rank {r}: {len(fx.units)} units, {len(fx.steps)} step(s), {fx.basis}, "
                     f"prefetch fwd {fx.prefetch_forward} bwd {fx.prefetch_backward}: gathers "
                     f"{_ms(fx.gather_us)}, exposed {_ms(fx.exposed_us)}, model "
                     f"{_ms(fx.model_exposed_us)}")
        lines.append(f"  {'unit':>6} {'fwd gather':>10} {'exposed':>8} {'model':>6} "
                     f"{'bwd gather':>10} {'exposed':>8} {'model':>6} {'compute fwd':>11} "
                     f"{'bwd':>6}")
        for u in fx.units:
            lines.append(f"  {u.unit:>6} {_ms(u.forward_gather_us):>10} "
                         f"{_ms(u.forward_exposed_us):>8} {_ms(u.model_forward_exposed_us):>6} "
                         f"{_ms(u.backward_gather_us):>10} {_ms(u.backward_exposed_us):>8} "
                         f"{_ms(u.model_backward_exposed_us):>6} "
                         f"{_ms(u.forward_compute_us):>11} {_ms(u.backward_compute_us):>6}")
        lines += [f"  note: {n}" for n in fx.notes]
    return lines
