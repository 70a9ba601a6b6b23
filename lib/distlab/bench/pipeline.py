"""Loading-pipeline benchmark: sync, threads, processes and torch's DataLoader side by side.

    python -m distlab.bench pipeline --items 200 --cost-ms 2 --stages 3 --kind sleep \\
        --queue-depth 2 --workers 2 --repeats 5 --json results/pipeline_cpu.json

Workload: ``--stages`` stages of equal cost ``--cost-ms`` (``sleep`` stands for I/O and releases
the GIL; ``burn`` is CPU work in torch matmuls for ``cost-ms`` of wall time; ``work`` is a
calibrated amount of such work, which on 2 cores cannot run 3 stages at full speed at once). Every executor runs the same stages on the same
items in this one process run: warmup runs first (they also spawn persistent workers), then
``--repeats`` timed runs; the table shows medians.

Columns: ``wall(s)`` median wall time; ``bound(s)`` the bottleneck bound of the executor's plan
(:func:`distlab.pipeline.model.bound_s`) with stage costs *measured* in the sync runs (mean span
duration per stage, so a sleep's oversleep counts as stage cost, not as executor overhead);
``eff`` = bound / wall; ``sim err`` = (simulated makespan - wall) / wall; ``stall(s)`` consumer
idle time; ``vs sync`` = sync wall / wall.

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
from typing import Any

from tqdm import tqdm

from distlab.bench.provenance import provenance, write_json
from distlab.pipeline import EXECUTORS, equal_stages, make_executor
from distlab.pipeline.model import measured_costs, plan_for, simulate
from distlab.pipeline.model import bound_s as model_bound_s

__all__ = ["main", "run_benchmark"]

TARGET_EFF = 1 / 1.1        # threads within 10% of the bound
TARGET_SPEEDUP = 1.8        # threads vs sync
TARGET_OVERHEAD_US = 50.0   # per item per stage


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m distlab.bench pipeline",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--items", type=int, default=200, help="items per run (default 200)")
    p.add_argument("--cost-ms", type=float, default=2.0, help="cost of each stage, ms")
    p.add_argument("--stages", type=int, default=3, help="number of equal stages")
    p.add_argument("--kind", choices=("sleep", "burn", "work"), default="sleep",
                   help="stage kind: sleep (I/O stand-in), burn (CPU matmuls for cost-ms of wall "
                        "time) or work (a calibrated amount of CPU matmuls; slows down when "
                        "the cores are shared)")
    p.add_argument("--queue-depth", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--overhead-items", type=int, default=2000,
                   help="items for the zero-cost overhead runs (0 skips them)")
    p.add_argument("--executors", default=",".join(EXECUTORS),
                   help=f"comma-separated subset of {','.join(EXECUTORS)}")
    p.add_argument("--torch-threads", type=int, default=1,
                   help="torch intra-op threads in this process (default 1: the executors' own "
                        "threads are the parallelism; worker processes always use 1)")
    p.add_argument("--json", default=None, help="write results with provenance to this path")
    p.add_argument("--check", action="store_true",
                   help="exit 1 when a target (threads eff, speedup, overhead) is missed")
    a = p.parse_args(argv)
    for name in ("items", "stages", "queue_depth", "repeats", "torch_threads"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}")
    for name in ("workers", "warmup", "overhead_items"):
        if getattr(a, name) < 0:
            p.error(f"--{name.replace('_', '-')} must be >= 0, got {getattr(a, name)}")
    if a.cost_ms < 0:
        p.error(f"--cost-ms must be >= 0, got {a.cost_ms}")
    a.executors = [e.strip() for e in a.executors.split(",") if e.strip()]
    bad = [e for e in a.executors if e not in EXECUTORS]
    if bad or not a.executors:
        p.error(f"--executors must be a subset of {','.join(EXECUTORS)}, got {bad or a.executors}")
    return a


def _timed_runs(name: str, stages: list[Any], items: int, a: argparse.Namespace,
                bar: tqdm) -> list[Any]:
    out = []
    with make_executor(name, queue_depth=a.queue_depth, workers=a.workers) as ex:
        for i in range(a.warmup + a.repeats):
            res = ex.run(stages, items)
            bar.update(1)
            if i >= a.warmup:
                out.append(res)
    return out


def run_benchmark(a: argparse.Namespace) -> dict[str, Any]:
    """Run everything; returns the JSON payload (without provenance)."""
    import torch

    torch.set_num_threads(a.torch_threads)
    stages = equal_stages(a.kind, a.stages, a.cost_ms / 1000.0)
    names = [s.name for s in stages]
    placements = [s.placement for s in stages]
    execs = list(dict.fromkeys(["sync", *a.executors]))  # sync first: it measures stage costs
    total = len(execs) * (a.warmup + a.repeats) * (2 if a.overhead_items else 1)
    bar = tqdm(total=total, desc="pipeline bench", file=sys.stderr, leave=False)
    runs = {name: _timed_runs(name, stages, a.items, a, bar) for name in execs}
    costs = [statistics.median(c) for c in zip(*(measured_costs(r.timeline, names)
                                                 for r in runs["sync"]))]
    rows = []
    sync_wall = statistics.median(r.wall_s for r in runs["sync"])
    for name in execs:
        walls = [r.wall_s for r in runs[name]]
        wall = statistics.median(walls)
        plan = plan_for(name, names, costs, placements, workers=a.workers,
                        queue_depth=a.queue_depth)
        bound = model_bound_s(plan, a.items)
        sim_tl = simulate(plan, a.items)
        sim = sim_tl.wall_us() * 1e-6
        rows.append({"executor": name, "wall_s": wall, "wall_min_s": min(walls),
                     "wall_max_s": max(walls), "bound_s": bound,
                     "efficiency": bound / wall if wall else 0.0,
                     "sim_s": sim, "sim_err": (sim - wall) / wall if wall else 0.0,
                     "stall_s": statistics.median(r.stall_s for r in runs[name]),
                     "items_per_s": a.items / wall if wall else 0.0,
                     "speedup_vs_sync": sync_wall / wall if wall else 0.0,
                     "config": runs[name][0].config, "notes": runs[name][0].timeline.notes})
    overhead = []
    if a.overhead_items:
        zero = equal_stages("identity", a.stages, 0.0)
        for name in execs:
            walls = [r.wall_s for r in _timed_runs(name, zero, a.overhead_items, a, bar)]
            wall = statistics.median(walls)
            overhead.append({"executor": name, "wall_s": wall,
                             "us_per_item": wall / a.overhead_items * 1e6,
                             "us_per_item_per_stage": wall / (a.overhead_items * a.stages) * 1e6})
    bar.close()
    return {"config": {k: v for k, v in vars(a).items() if k not in ("json", "check")},
            "torch_threads": torch.get_num_threads(), "load_avg": list(os.getloadavg()),
            "stage_costs_s_measured_sync": dict(zip(names, costs)),
            "rows": rows, "overhead": overhead, "targets": _targets(rows, overhead)}


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
    print(f"{'executor':>10} {'wall(s)':>9} {'min(s)':>8} {'bound(s)':>9} {'eff':>6} "
          f"{'sim(s)':>8} {'sim err':>8} {'stall(s)':>9} {'items/s':>9} {'vs sync':>8}")
    for r in payload["rows"]:
        print(f"{r['executor']:>10} {r['wall_s']:9.4f} {r['wall_min_s']:8.4f} "
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
