"""Loading-pipeline benchmark: sync, threads, processes and torch's DataLoader side by side.

    python -m distlab.bench pipeline --items 200 --cost-ms 2 --stages 3 --kind sleep \\
        --queue-depth 2 --workers 2 --repeats 5 --json results/pipeline_cpu.json

Workload: ``--stages`` stages of equal cost ``--cost-ms`` (``sleep`` stands for I/O and releases
the GIL; ``burn`` is CPU work in torch matmuls for ``cost-ms`` of wall time; ``work`` is a
calibrated amount of such work, which on 2 cores cannot run 3 stages at full speed at once). Every executor runs the same stages on the same
items in this one process run: warmup runs first (they also spawn persistent workers), then
``--repeats`` timed runs; the table shows medians.

Columns: ``start(s)`` worker start-up of the executor's first run (spawning processes; 0 for
sync and threads; n/a where the executor does not time it apart), kept out of every other
column (the warm-up runs absorb it); ``wall(s)`` median wall time of the steady
pipeline; ``bound(s)`` the bottleneck bound of the executor's plan
(:func:`distlab.pipeline.model.plan_for_stages`, :func:`~distlab.pipeline.model.bound_s`) with
stage costs *measured* in the sync runs (mean span duration per stage, so a sleep's oversleep
counts as stage cost, not as executor overhead); ``eff`` = bound / wall; ``sim err`` =
(simulated makespan - wall) / wall; ``stall(s)`` consumer idle time; ``vs sync`` = sync wall /
wall.

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
from collections.abc import Callable, Sequence
from typing import Any

from tqdm import tqdm

from distlab.bench import options
from distlab.bench.provenance import provenance, write_json
from distlab.pipeline import EXECUTORS, equal_stages, make_executor
from distlab.pipeline.build import EQUAL_KINDS
from distlab.pipeline.model import (bound_s, measured_costs, plan_for_stages, simulate,
                                     startup_s)

__all__ = ["compare_executors", "main", "run_benchmark", "startup_s"]

TARGET_EFF = 1 / 1.1        # threads within 10% of the bound
TARGET_SPEEDUP = 1.8        # threads vs sync
TARGET_OVERHEAD_US = 50.0   # per item per stage


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


def _parser() -> argparse.ArgumentParser:
    p = options.parser("python -m distlab.bench pipeline", __doc__)
    p.add_argument("--items", type=options.positive_int, default=200, help="items per run")
    p.add_argument("--cost-ms", type=_nonnegative_float, default=2.0,
                   help="cost of each stage, milliseconds")
    p.add_argument("--stages", type=options.positive_int, default=3,
                   help="number of equal stages (the last one is the consumer)")
    p.add_argument("--kind", choices=EQUAL_KINDS[:3], default="sleep",
                   help="stage kind, one of sleep (I/O stand-in), burn (CPU matmuls for cost-ms "
                        "of wall time) or work (a calibrated amount of CPU matmuls; slows down "
                        "when the cores are shared)")
    p.add_argument("--queue-depth", type=options.positive_int, default=2,
                   help="bounded queue depth between stages (items)")
    p.add_argument("--workers", type=options.nonnegative_int, default=2,
                   help="worker processes of the processes and torch executors")
    p.add_argument("--repeats", type=options.positive_int, default=5,
                   help="timed runs per executor (the table shows medians)")
    p.add_argument("--warmup", type=options.nonnegative_int, default=1,
                   help="untimed runs per executor before the timed ones")
    p.add_argument("--overhead-items", type=options.nonnegative_int, default=2000,
                   help="items for the zero-cost overhead runs (0 skips them)")
    p.add_argument("--executors", type=options.comma_choices(EXECUTORS, all_word="all"),
                   default=",".join(EXECUTORS),
                   help=f"comma-separated subset of {','.join(EXECUTORS)} (or all)")
    p.add_argument("--torch-threads", type=options.positive_int, default=1,
                   help="torch intra-op threads in this process (1: the executors' own threads "
                        "are the parallelism; worker processes always use 1)")
    p.add_argument("--json", default=None,
                   help="write results with provenance to this path")
    p.add_argument("--check", action="store_true",
                   help="exit 1 when a target (threads eff, speedup, overhead) is missed")
    return p


def _parse(argv: list[str]) -> argparse.Namespace:
    p = _parser()
    a = p.parse_args(argv)
    if a.json is not None and (os.path.isdir(a.json) or not a.json.strip()):
        options.fail(p, "--json", a.json, "a file path, not a folder")
    return a


def _median_run(runs: Sequence[Any]) -> Any:
    """The run whose wall time is the median (the lower middle one for an even count)."""
    ordered = sorted(runs, key=lambda r: r.wall_s)
    return ordered[(len(ordered) - 1) // 2]


def compare_executors(stages: Sequence[Any], items: int, executors: Sequence[str] = EXECUTORS,
                      *, workers: int = 2, queue_depth: int = 2, repeats: int = 3,
                      warmup: int = 1, on_run: Callable[[], None] | None = None
                      ) -> dict[str, Any]:
    """Run ``stages`` on every executor (sync always first: it measures the stage costs) and
    put the model beside each: what the benchmark and notebook 02 show.

    Each executor is made once (worker processes start in its first run and are reused):
    ``warmup`` untimed runs, then ``repeats`` timed runs of ``items`` items. Returns
    ``{"costs_s": {stage: seconds}, "rows": [...], "runs": {executor: median RunResult}}``;
    each row holds ``startup_s`` (worker start-up of the first run, seconds, reported apart;
    None when the executor does not time it apart),
    and for the steady pipeline ``wall_s`` (median, min, max), ``bound_s``, ``efficiency`` =
    bound / wall, ``sim_s``, ``sim_err`` = (sim - wall) / wall, ``stall_s``, ``items_per_s``,
    ``speedup_vs_sync``. ``on_run`` is called after every run (progress bars).
    """
    stages = list(stages)
    execs = list(dict.fromkeys(["sync", *executors]))
    runs: dict[str, list[Any]] = {}
    first_startup: dict[str, float | None] = {}
    for name in execs:
        runs[name] = []
        with make_executor(name, queue_depth=queue_depth, workers=workers) as ex:
            for i in range(warmup + repeats):
                res = ex.run(stages, items)
                if i == 0:   # None: this executor does not time its start-up apart
                    first_startup[name] = startup_s(res) if hasattr(res, "startup_s") else None
                if on_run is not None:
                    on_run()
                if i >= warmup:
                    runs[name].append(res)
    names = [s.name for s in stages]
    costs = [statistics.median(c) for c in zip(*(measured_costs(r.timeline, names)
                                                 for r in runs["sync"]))]
    sync_wall = statistics.median(r.wall_s for r in runs["sync"])
    rows = []
    for name in execs:
        walls = [r.wall_s for r in runs[name]]
        wall = statistics.median(walls)
        plan = plan_for_stages(name, stages, workers=workers, queue_depth=queue_depth,
                               costs_s=costs)
        bound = bound_s(plan, items)
        sim = simulate(plan, items).wall_us() * 1e-6
        rows.append({"executor": name, "startup_s": first_startup[name],
                     "wall_s": wall, "wall_min_s": min(walls), "wall_max_s": max(walls),
                     "bound_s": bound, "efficiency": bound / wall if wall else 0.0,
                     "sim_s": sim, "sim_err": (sim - wall) / wall if wall else 0.0,
                     "stall_s": statistics.median(r.stall_s for r in runs[name]),
                     "items_per_s": items / wall if wall else 0.0,
                     "speedup_vs_sync": sync_wall / wall if wall else 0.0,
                     "config": runs[name][0].config, "notes": runs[name][0].timeline.notes})
    return {"costs_s": dict(zip(names, costs)), "rows": rows,
            "runs": {name: _median_run(r) for name, r in runs.items()}}


def run_benchmark(a: argparse.Namespace) -> dict[str, Any]:
    """Run everything; returns the JSON payload (without provenance)."""
    import torch

    torch.set_num_threads(a.torch_threads)
    stages = equal_stages(a.kind, a.stages, a.cost_ms / 1000.0)
    execs = list(dict.fromkeys(["sync", *a.executors]))
    total = len(execs) * (a.warmup + a.repeats) * (2 if a.overhead_items else 1)
    bar = tqdm(total=total, desc="pipeline bench", file=sys.stderr, leave=False)
    cmp = compare_executors(stages, a.items, execs, workers=a.workers,
                            queue_depth=a.queue_depth, repeats=a.repeats, warmup=a.warmup,
                            on_run=lambda: bar.update(1))
    overhead = []
    if a.overhead_items:
        zero = equal_stages("identity", a.stages, 0.0)
        ov = compare_executors(zero, a.overhead_items, execs, workers=a.workers,
                               queue_depth=a.queue_depth, repeats=a.repeats, warmup=a.warmup,
                               on_run=lambda: bar.update(1))
        for r in ov["rows"]:
            wall = r["wall_s"]
            overhead.append({"executor": r["executor"], "wall_s": wall,
                             "us_per_item": wall / a.overhead_items * 1e6,
                             "us_per_item_per_stage": wall / (a.overhead_items * a.stages) * 1e6})
    bar.close()
    return {"config": {k: v for k, v in vars(a).items() if k not in ("json", "check")},
            "torch_threads": torch.get_num_threads(), "load_avg": list(os.getloadavg()),
            "stage_costs_s_measured_sync": cmp["costs_s"],
            "rows": cmp["rows"], "overhead": overhead, "targets": _targets(cmp["rows"], overhead)}


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


def _print(payload: dict[str, Any]) -> None:
    c = payload["config"]
    print(f"# pipeline: {c['stages']} x {c['kind']} stages of {c['cost_ms']:g} ms, "
          f"{c['items']} items, queue_depth {c['queue_depth']}, workers {c['workers']}, "
          f"median of {c['repeats']} (warmup {c['warmup']}); load avg "
          f"{payload['load_avg'][0]:.2f} on {os.cpu_count()} cores")
    costs = ", ".join(f"{k} {v * 1e3:.3f}"
                      for k, v in payload["stage_costs_s_measured_sync"].items())
    print(f"# stage costs measured in sync runs (ms): {costs}")
    print(f"{'executor':>10} {'start(s)':>9} {'wall(s)':>9} {'min(s)':>8} {'bound(s)':>9} "
          f"{'eff':>6} {'sim(s)':>8} {'sim err':>8} {'stall(s)':>9} {'items/s':>9} {'vs sync':>8}")
    for r in payload["rows"]:
        su = "n/a" if r["startup_s"] is None else f"{r['startup_s']:.4f}"
        print(f"{r['executor']:>10} {su:>9} {r['wall_s']:9.4f} "
              f"{r['wall_min_s']:8.4f} "
              f"{r['bound_s']:9.4f} {r['efficiency']:6.3f} {r['sim_s']:8.4f} "
              f"{r['sim_err'] * 100:7.1f}% {r['stall_s']:9.4f} {r['items_per_s']:9.1f} "
              f"{r['speedup_vs_sync']:7.2f}x")
    if payload["overhead"]:
        print(f"# executor overhead: zero-cost stages, {c['overhead_items']} items")
        print(f"{'executor':>10} {'wall(s)':>9} {'us/item':>9} {'us/item/stage':>14}")
        for r in payload["overhead"]:
            print(f"{r['executor']:>10} {r['wall_s']:9.4f} {r['us_per_item']:9.1f} "
                  f"{r['us_per_item_per_stage']:14.1f}")
    for name, t in payload["targets"].items():
        print(f"# target {name}: {t['value']:.3f} (target {t['target']:.3f}) "
              f"{'PASS' if t['ok'] else 'MISS'}")
    for note in sorted({n for r in payload["rows"] for n in r["notes"]}):
        print(f"# note: {note}")


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; see the module docstring."""
    a = _parse(list(sys.argv[1:] if argv is None else argv))
    payload = run_benchmark(a)
    _print(payload)
    if a.json:
        path = write_json(a.json, {"provenance": provenance(world_size=1), **payload})
        print(f"# wrote {path}")
    if a.check and not all(t["ok"] for t in payload["targets"].values()):
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
