"""Loading-pipeline benchmark: sync, threads, processes and torch's DataLoader side by side.

    python -m distlab.bench loading --items 200 --cost-ms 2 --stages 3 --kind sleep \\
        --queue-depth 2 --workers 2 --repeats 5 --json results/pipeline_cpu.json

Workload: ``--stages`` stages of equal cost ``--cost-ms`` (``sleep`` stands for I/O and releases the
GIL; ``burn`` is CPU work in torch matmuls for ``cost-ms`` of wall time; ``work`` is a calibrated
amount of such work, which on 2 cores cannot run 3 stages at full speed at once). Every executor
runs the same stages on the same items in this one process run: warmup runs first (they also spawn
persistent workers), then ``--repeats`` timed runs; the table shows medians.

Columns: ``start(s)`` worker start-up (``RunResult.startup_s``: spawning the processes in the
executor's first run, which every later run on them reports too; 0 for sync and threads, which
start no process), kept out of every other column (the warm-up runs absorb it);
``wall(s)`` median wall time of the steady pipeline; ``bound(s)`` the bottleneck bound of the
executor's plan (:func:`distlab.loading.bottleneck.plan_for_stages`,
:func:`~distlab.loading.bottleneck.bound_s`) with stage costs *measured* in the sync runs (mean
span duration per stage, so a sleep's oversleep counts as stage cost, not as executor overhead);
``eff`` = bound / wall; ``sim err%`` = :func:`distlab.vocabulary.error_pct` of the wall against the
simulated makespan, (wall - sim) / sim (positive: slower than the model); ``stall(s)`` consumer idle
time; ``vs sync`` = sync wall / wall.

The hop between processes: the ``processes`` and ``torch`` plans include the hop of each worker
output into the trainer (:mod:`distlab.loading.hop_cost`: measured once per run for the worker
stages' output size, with a busy worker, by its own spawned worker whose start-up is reported
apart); the head line gives the sim err% without it. ``--no-hop`` leaves it out.

Executor overhead: the same executors on ``--stages`` zero-cost stages over
``--overhead-items`` items. ``us/item`` = wall / items (for pipelined executors: the cost of
the slowest hop); ``us/item/stage`` = wall / (items * stages), the overhead the executor adds
per stage call (stage threads run Python under one GIL, so their per-hop work serializes).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from distlab._checks import check_float
from distlab.bench.harness import BenchConfig, Benchmark, Report, opt, run_cli
from distlab.cli import options
from distlab.loading import EXECUTORS, equal_stages, make_executor
from distlab.loading.bottleneck import (
    bound_s,
    measured_costs,
    plan_for_stages,
    simulate_pipeline,
    startup_s,
)
from distlab.loading.build import EQUAL_KINDS
from distlab.loading.hop_cost import measure_hop_cost, worker_output_nbytes
from distlab.report.jsonfile import SchemaError, read_json
from distlab.report.table import Column, Table, format_table
from distlab.vocabulary import error_pct

__all__ = ["BENCHMARK", "COLUMNS", "COMMENT_WIDTH", "PipelineBenchmark", "PipelineConfig",
           "compare_executors", "main", "overlap_saving_text", "saved_result_text",
           "stage_costs_lines", "wrap_lines"]

TARGET_EFF = 1 / 1.1        # threads within 10% of the bound
TARGET_SPEEDUP = 1.8        # threads vs sync
TARGET_OVERHEAD_US = 50.0   # per item per stage

#: The widest comment line (without its ``# ``): a notebook shows at most 110 characters a line
#: before JupyterLab wraps it.
COMMENT_WIDTH = 108

COLUMNS = (Column("executor", "executor", width=10), Column("start(s)", "startup_s", ".4f"),
           Column("wall(s)", "wall_s", ".4f"), Column("min(s)", "wall_min_s", ".4f"),
           Column("bound(s)", "bound_s", ".4f"), Column("eff", "efficiency", ".3f"),
           Column("sim(s)", "sim_s", ".4f"), Column("sim err%", "sim_error_pct", "+.1f"),
           Column("stall(s)", "stall_s", ".4f"), Column("items/s", "items_per_s", ".1f"),
           Column("vs sync", "speedup_vs_sync", ".2f"))
OVERHEAD_COLUMNS = (Column("executor", "executor", width=10), Column("wall(s)", "wall_s", ".4f"),
                    Column("us/item", "us_per_item", ".1f"),
                    Column("us/item/stage", "us_per_item_per_stage", ".1f"))



def _sim_error_pct(wall_s: float, sim_s: float) -> float | None:
    """The measured wall against the simulated makespan, percent (None: nothing simulated)."""
    return error_pct(wall_s, sim_s) if sim_s > 0 else None

def _nonnegative_float(text: str) -> float:
    """A finite number >= 0 (milliseconds)."""
    try:
        value = float(str(text).strip())
    except ValueError:
        value = float("nan")
    if not (value >= 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: must be a finite number >= 0")
    return value


_nonnegative_float.__name__ = "number>=0"


@dataclass(frozen=True)
class PipelineConfig(BenchConfig):
    """Options of ``python -m distlab.bench loading``."""

    items: int = opt(200, "--items", type=options.positive_int, help="items per run")
    cost_ms: float = opt(2.0, "--cost-ms", type=_nonnegative_float,
                         help="cost of each stage, milliseconds")
    stages: int = opt(3, "--stages", type=options.positive_int,
                      help="number of equal stages (the last one is the consumer)")
    kind: str = opt("sleep", "--kind", choices=EQUAL_KINDS[:3],
                    help="stage kind, one of sleep (I/O stand-in), burn (CPU matmuls for cost-ms "
                         "of wall time) or work (a calibrated amount of CPU matmuls; slows down "
                         "when the cores are shared)")
    queue_depth: int = opt(2, "--queue-depth", type=options.positive_int,
                           help="bounded queue depth between stages (items)")
    workers: int = opt(2, "--workers", type=options.nonnegative_int,
                       help="worker processes of the processes and torch executors")
    repeats: int = opt(5, "--repeats", type=options.positive_int,
                       help="timed runs per executor (the table shows medians)")
    warmup: int = opt(1, "--warmup", type=options.nonnegative_int,
                      help="untimed runs per executor before the timed ones")
    overhead_items: int = opt(2000, "--overhead-items", type=options.nonnegative_int,
                              help="items for the zero-cost overhead runs (0 skips them)")
    executors: tuple[str, ...] = opt(tuple(EXECUTORS), "--executors",
                                     type=options.comma_choices(EXECUTORS, all_word="all"),
                                     help=f"comma-separated subset of {','.join(EXECUTORS)} "
                                          "(or all)")
    torch_threads: int = opt(1, "--torch-threads", type=options.positive_int,
                             help="torch intra-op threads in this process (1: the executors' own "
                                  "threads are the parallelism; worker processes always use 1)")
    no_hop: bool = opt(False, "--no-hop", action="store_true",
                       help="leave the hop between processes out of the processes and torch "
                            "models (by default it is measured for the size of the worker "
                            "stages' output, with a busy worker: distlab.loading.hop_cost)")
    check: bool = opt(False, "--check", action="store_true",
                      help="exit 1 when a target (threads eff, speedup, overhead) is missed")


def _median_run(runs: Sequence[Any]) -> Any:
    """The run whose wall time is the median (the lower middle one for an even count)."""
    ordered = sorted(runs, key=lambda r: r.wall_s)
    return ordered[(len(ordered) - 1) // 2]


def compare_executors(stages: Sequence[Any], items: int, executors: Sequence[str] = EXECUTORS,
                      *, workers: int = 2, queue_depth: int = 2, repeats: int = 3,
                      warmup: int = 1, on_run: Callable[[], None] | None = None,
                      hop_s: float | None = None, hop_send_s: float = 0.0) -> dict[str, Any]:
    """Run ``stages`` on every executor (sync always first: it measures the stage costs) and
    put the model beside each: what the benchmark and notebook 02 show.

    Each executor is made once (worker processes start in its first run and are reused):
    ``warmup`` untimed runs, then ``repeats`` timed runs of ``items`` items. Returns
    ``{"costs_s": {stage: seconds}, "rows": [...], "runs": {executor: median RunResult}}``;
    each row holds ``startup_s`` (worker start-up, seconds, reported apart:
    :func:`~distlab.loading.bottleneck.startup_s` of the median run, the one figure the
    executor's runs share and the figures of ``runs`` show),
    and for the steady pipeline ``wall_s`` (median, min, max), ``bound_s``, ``efficiency`` =
    bound / wall, ``sim_s``, ``sim_error_pct`` (:func:`~distlab.vocabulary.error_pct` of the wall
    against sim, percent; None without a simulated time), ``stall_s``, ``items_per_s``,
    ``speedup_vs_sync``. ``on_run`` is called after every run (progress bars).

    ``hop_s``, ``hop_send_s``: seconds per item of the hop of a worker's output into the
    trainer, paid by the receiving thread and by the worker
    (:class:`distlab.loading.hop_cost.HopCost`'s ``receive_s`` and ``send_s``); when ``hop_s``
    is given, the ``processes`` and ``torch`` plans include the hop (bound, efficiency, sim and
    sim_error_pct), and every row also carries the model without it as ``sim_s_no_hop`` and
    ``sim_error_pct_no_hop``.
    """
    stages = list(stages)
    execs = list(dict.fromkeys(["sync", *executors]))
    runs: dict[str, list[Any]] = {}
    for name in execs:
        runs[name] = []
        with make_executor(name, queue_depth=queue_depth, workers=workers) as ex:
            for i in range(warmup + repeats):
                res = ex.run(stages, items)
                if on_run is not None:
                    on_run()
                if i >= warmup:
                    runs[name].append(res)
    names = [s.name for s in stages]
    costs = [statistics.median(c) for c in zip(*(measured_costs(r.timeline, names)
                                                 for r in runs["sync"]), strict=False)]
    sync_wall = statistics.median(r.wall_s for r in runs["sync"])
    rows = []
    medians = {name: _median_run(r) for name, r in runs.items()}
    for name in execs:
        walls = [r.wall_s for r in runs[name]]
        wall = statistics.median(walls)
        plan = plan_for_stages(name, stages, workers=workers, queue_depth=queue_depth,
                               costs_s=costs, hop_s=hop_s or 0.0,
                               hop_send_s=hop_send_s if hop_s is not None else 0.0)
        bound = bound_s(plan, items)
        sim = simulate_pipeline(plan, items).wall_us() * 1e-6
        extra: dict[str, Any] = {}
        if hop_s is not None:
            plain = plan_for_stages(name, stages, workers=workers, queue_depth=queue_depth,
                                    costs_s=costs)
            sim0 = simulate_pipeline(plain, items).wall_us() * 1e-6
            crosses = name in ("processes", "torch")
            extra = {"hop_s": hop_s if crosses else 0.0,
                     "hop_send_s": hop_send_s if crosses else 0.0,
                     "sim_s_no_hop": sim0, "sim_error_pct_no_hop": _sim_error_pct(wall, sim0)}
        rows.append({"executor": name, "startup_s": startup_s(medians[name]),
                     "wall_s": wall, "wall_min_s": min(walls), "wall_max_s": max(walls),
                     "bound_s": bound, "efficiency": bound / wall if wall else 0.0,
                     "sim_s": sim, "sim_error_pct": _sim_error_pct(wall, sim),
                     "stall_s": statistics.median(r.stall_s for r in runs[name]),
                     "items_per_s": items / wall if wall else 0.0,
                     "speedup_vs_sync": sync_wall / wall if wall else 0.0,
                     **extra,
                     "config": runs[name][0].config, "notes": runs[name][0].timeline.notes})
    return {"costs_s": dict(zip(names, costs, strict=False)), "rows": rows,
            "runs": medians}


def overlap_saving_text(sync_s: float, overlapped_s: float, predicted_saving_s: float) -> str:
    """What overlap did to the wall time, signed as it happened: ``"overlap saved 300 ms of the
    320 ms the model predicts (94%)"`` when the overlapped run was faster than sync, ``"no
    saving: the overlapped run took 1441 ms longer than sync (the model predicts 1264 ms
    saved)"`` when it was not. The one place notebooks word the saving.

    Args:
        sync_s: the sync (no-overlap) run's wall time, seconds.
        overlapped_s: the overlapped run's wall time, seconds.
        predicted_saving_s: the model's saving, sync minus overlapped, seconds.

    Raises:
        TypeError, ValueError: a time that is not a finite number (``sync_s`` and
            ``overlapped_s`` also >= 0), naming it.
    """
    sync_s = check_float("sync_s (seconds)", sync_s, minimum=0.0)
    overlapped_s = check_float("overlapped_s (seconds)", overlapped_s, minimum=0.0)
    predicted = check_float("predicted_saving_s (seconds)", predicted_saving_s)
    saved = sync_s - overlapped_s
    model = (f"the model predicts {predicted * 1e3:.0f} ms saved" if predicted > 0 else
             "the model predicts no saving")
    if saved > 0:
        if predicted > 0:
            return (f"overlap saved {saved * 1e3:.0f} ms of the {predicted * 1e3:.0f} ms the "
                    f"model predicts ({saved / predicted:.0%})")
        return f"overlap saved {saved * 1e3:.0f} ms ({model})"
    return (f"no saving: the overlapped run took {(overlapped_s - sync_s) * 1e3:.0f} ms longer "
            f"than sync ({model})")


def wrap_lines(lines: Sequence[str], width: int = COMMENT_WIDTH) -> list[str]:
    """``lines`` with each one wider than ``width`` characters wrapped at word boundaries (the
    continuation indented by two spaces); nothing is cut."""
    return [part for line in lines
            for part in textwrap.wrap(line, width, subsequent_indent="  ",
                                      break_long_words=False, break_on_hyphens=False) or [""]]


def stage_costs_lines(costs_s: Mapping[str, float], label: str = "sync runs",
                      width: int = COMMENT_WIDTH) -> list[str]:
    """``stage costs measured in <label> (ms): read 10.22, decode 10.73, ...``: the stage costs
    (seconds in, milliseconds shown), the form the benchmark and notebook 02 print, in lines of
    at most ``width`` characters broken only between stages (continuations indented by two)."""
    lines = [f"stage costs measured in {label} (ms):"]
    entries = [f"{name} {seconds * 1e3:.2f}" for name, seconds in costs_s.items()]
    for i, entry in enumerate(entries):
        text = entry + ("," if i < len(entries) - 1 else "")
        if len(lines[-1]) + 1 + len(text) > width:
            lines.append("  " + text)
        else:
            lines[-1] += " " + text
    return lines


def _overhead_rows(config: PipelineConfig, execs: list[str],
                   on_run: Callable[[], None]) -> list[dict[str, Any]]:
    """The executors on zero-cost stages: what each adds per item and per stage call."""
    c = config
    zero = equal_stages("identity", c.stages, 0.0)
    ov = compare_executors(zero, c.overhead_items, execs, workers=c.workers,
                           queue_depth=c.queue_depth, repeats=c.repeats, warmup=c.warmup,
                           on_run=on_run)
    return [{"executor": r["executor"], "wall_s": r["wall_s"],
             "us_per_item": r["wall_s"] / c.overhead_items * 1e6,
             "us_per_item_per_stage": r["wall_s"] / (c.overhead_items * c.stages) * 1e6}
            for r in ov["rows"]]


def _targets(rows: list[dict[str, Any]], overhead: list[dict[str, Any]]) -> dict[str, Any]:
    by = {r["executor"]: r for r in rows}
    ov = {r["executor"]: r for r in overhead}
    out: dict[str, Any] = {}
    if "threads" in by:
        out["threads_efficiency"] = {"value": by["threads"]["efficiency"], "target": TARGET_EFF,
                                     "ok": by["threads"]["efficiency"] >= TARGET_EFF}
        out["threads_speedup_vs_sync"] = {"value": by["threads"]["speedup_vs_sync"],
                                          "target": TARGET_SPEEDUP,
                                          "ok": by["threads"]["speedup_vs_sync"] >= TARGET_SPEEDUP}
    for name in ("sync", "threads"):
        if name in ov:
            v = ov[name]["us_per_item_per_stage"]
            out[f"{name}_overhead_us_per_item_per_stage"] = {
                "value": v, "target": TARGET_OVERHEAD_US, "ok": v <= TARGET_OVERHEAD_US}
    return out


class PipelineBenchmark(Benchmark[PipelineConfig]):
    """The loading-pipeline executors against their model and torch's DataLoader."""

    name = "loading"
    about = "loading pipeline executors vs their bottleneck model and torch's DataLoader"
    config_type = PipelineConfig

    def run(self, config: PipelineConfig) -> Report:
        c = config
        torch.set_num_threads(c.torch_threads)
        stages = equal_stages(c.kind, c.stages, c.cost_ms / 1000.0)
        execs = list(dict.fromkeys(["sync", *c.executors]))
        total = len(execs) * (c.warmup + c.repeats) * (2 if c.overhead_items else 1)
        hop = None
        if not c.no_hop and c.workers and {"processes", "torch"} & set(execs):
            hop = measure_hop_cost(worker_output_nbytes(stages, 0, c.workers))
        with tqdm(total=total, desc="loading bench", file=sys.stderr, leave=False) as bar:
            cmp = compare_executors(stages, c.items, execs, workers=c.workers,
                                    queue_depth=c.queue_depth, repeats=c.repeats,
                                    warmup=c.warmup, on_run=lambda: bar.update(1),
                                    hop_s=hop.receive_s if hop else None,
                                    hop_send_s=hop.send_s if hop else 0.0)
            overhead = _overhead_rows(c, execs, lambda: bar.update(1)) \
                if c.overhead_items else []
        targets = _targets(cmp["rows"], overhead)
        load = list(os.getloadavg())
        head = [f"pipeline: {c.stages} x {c.kind} stages of {c.cost_ms:g} ms, {c.items} items, "
                f"queue_depth {c.queue_depth}, workers {c.workers}",
                f"median of {c.repeats} timed runs (warmup {c.warmup}); load avg {load[0]:.2f} "
                f"on {os.cpu_count()} cores",
                *stage_costs_lines(cmp["costs_s"])]
        if hop is not None and hop.nbytes == 0:
            head.append("hop into the trainer: the worker stages' output carries no tensor or "
                        "bytes (0 B cross), so the processes/torch models add nothing for it")
        elif hop is not None:
            no_hop = ", ".join(f"{r['executor']} {r['sim_error_pct_no_hop']:+.1f}%"
                               for r in cmp["rows"] if r["executor"] in ("processes", "torch"))
            head += [f"hop per item into the trainer, in the processes/torch models: "
                     f"{hop.seconds * 1e6:.0f} us for {hop.nbytes} B ({hop.path})",
                     f"busy worker: {hop.send_s * 1e6:.0f} us in the worker, "
                     f"{hop.receive_s * 1e6:.0f} us receiving; its worker's start-up "
                     f"{hop.startup_s:.2f} s apart; sim err% without it: {no_hop}"]
        tail = [f"target {name}: {t['value']:.3f} (target {t['target']:.3f}) "
                f"{'PASS' if t['ok'] else 'MISS'}" for name, t in targets.items()]
        tail += [f"note: {n}" for n in sorted({n for r in cmp["rows"] for n in r["notes"]})]
        tables = [Table(cmp["rows"], COLUMNS)]
        if overhead:
            tables.append(Table(overhead, OVERHEAD_COLUMNS, f"executor overhead: zero-cost "
                                                            f"stages, {c.overhead_items} items",
                                "overhead"))
        missed = [n for n, t in targets.items() if not t["ok"]]
        return Report(tables, wrap_lines(head), wrap_lines(tail),
                      {"torch_threads": torch.get_num_threads(), "load_avg": load,
                       "hop": hop.as_dict() if hop else None,
                       "stage_costs_s_measured_sync": cmp["costs_s"], "targets": targets},
                      failed=f"targets missed: {', '.join(missed)}" if c.check and missed else "",
                      world_size=1)


BENCHMARK = PipelineBenchmark()


def saved_result_text(path: str | os.PathLike[str]) -> str:
    """A ``--json`` file this benchmark wrote, as its own table: one line from the file's config
    and provenance, then its rows under :data:`COLUMNS` (a value not measured prints ``-``).

    Raises:
        SchemaError: ``path`` is a result of another schema
            (:func:`~distlab.report.jsonfile.read_json`).
        ValueError: ``path`` is not JSON with ``config``, ``provenance`` and ``rows``.
    """
    try:
        data = read_json(path)
        c, prov, rows = data["config"], data["provenance"], data["rows"]
    except SchemaError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a `bench loading --json` result ({exc})") from None
    head = (f"# {Path(path).name}: {c['stages']} x {c['kind']} stages of {c['cost_ms']:g} ms, "
            f"{c['items']} items, {prov.get('cpu_cores', '?')} cores, {prov.get('date', '?')}")
    return head + "\n" + format_table(rows, COLUMNS)


def main(argv: list[str] | None = None) -> int:
    """``python -m distlab.bench loading``; see the module docstring."""
    return run_cli(BENCHMARK, argv)
