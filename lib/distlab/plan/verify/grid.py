"""A grid of one-device runs: model size x sequence x micro-batch x recompute x ZeRO x optimizer,
each trained a few steps on this machine's first device, its step time and peak allocated and
reserved memory written as JSON rows, for the planner's memory and step models to be judged
against (``python -m distlab.judge fit``).

    python -m distlab.plan.verify.grid --out grid.json                      # the default grid
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \\
        python -m distlab.plan.verify.grid --out grid-expandable.json
    python -m distlab.plan.verify.grid --out g.json --cases "llama3.2-1b s4096 mb2 full" \\
        --history trace.json.gz --profile kernels.txt

One process runs every case of the grid in turn on a world of one (a process group of one rank:
NCCL on a GPU, gloo on a host), with :func:`~distlab.plan.verify.rank.run_rank`, freeing the
device between cases (``torch.cuda.empty_cache``); a case that runs out of memory is a row with
``"oom"`` set. Rows are written after every case, so a run stopped by ``--limit-s`` (or killed)
keeps what it measured. ``--history`` records the caching allocator's every event for the cases
it names (``torch.cuda.memory._record_memory_history``; the actions, addresses, sizes and streams,
gzipped JSON), ``--profile`` the kernels of one step of each of them (``torch.profiler``).
The allocator's setting (``PYTORCH_CUDA_ALLOC_CONF``) is read, not set: it must be in the
environment before CUDA starts.
"""

from __future__ import annotations

import datetime
import gzip
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from distlab.cli import options
from distlab.plan.verify.cases import DEFAULT_GRID, TOO_BIG, GridCase, parse_case
from distlab.plan.verify.rank import MeasuredOutOfMemory, VerifyCase, run_rank
from distlab.report.jsonfile import write_json
from distlab.transformer import PRESETS, model_spec
from distlab.vocabulary import size_in

__all__ = ["DEFAULT_GRID", "TOO_BIG", "GridCase", "main", "parse_case", "run_grid"]


def _init_group(device: str) -> None:
    if dist.is_initialized():
        return
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    dist.init_process_group("nccl" if device == "cuda" else "gloo", rank=0, world_size=1)


def _history_events(snapshot: dict[str, Any]) -> list[list[Any]]:
    out = []
    for trace in snapshot.get("device_traces", []):
        for e in trace:
            out.append([e.get("action"), int(e.get("addr", 0)), int(e.get("size", 0)),
                        int(e.get("stream", 0))])
    return out


def _provenance(device: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(), "python": sys.version.split()[0], "torch": torch.__version__,
        "device": device, "command": " ".join(sys.argv),
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}
    if device == "cuda":
        out["gpu"] = torch.cuda.get_device_name(0)
        out["cuda"] = torch.version.cuda
        out["gpu_total_bytes"] = int(torch.cuda.mem_get_info(0)[1])
    return out


def run_grid(cases: tuple[GridCase, ...], out: Path, *, device: str = "cuda", steps: int = 3,
             warmup: int = 1, memory_bytes: int | None = None,
             limit_s: float = 1e9, history: tuple[str, ...] = (),
             history_out: Path | None = None, profile: tuple[str, ...] = (),
             profile_out: Path | None = None) -> list[dict[str, Any]]:
    """Run ``cases`` in turn (the module docstring); returns the rows written to ``out``."""
    _init_group(device)
    t0 = time.monotonic()
    doc: dict[str, Any] = {"provenance": _provenance(device), "rows": []}
    if device == "cuda":
        torch.cuda.init()
        free, total = torch.cuda.mem_get_info(0)
        doc["provenance"]["device_used_at_start"] = int(total - free)
        if memory_bytes is not None:
            # the caching allocator refuses to reserve past this, as a smaller card would
            torch.cuda.set_per_process_memory_fraction(min(1.0, memory_bytes / total), 0)
            doc["provenance"]["allocator_limit_bytes"] = int(memory_bytes)
    traces: dict[str, Any] = {}
    kernels: list[str] = []
    for i, case in enumerate(cases):
        if time.monotonic() - t0 > limit_s:
            doc["stopped"] = f"--limit-s {limit_s:g} reached before {case.name}"
            break
        spec = model_spec(case.model, seq_len=case.seq_len)
        vc = VerifyCase(spec, case.layout(), steps=steps, warmup=warmup,
                        optimizer=case.optimizer, device=device)
        record = device == "cuda" and case.name in history
        if record:
            torch.cuda.memory._record_memory_history(max_entries=2_000_000, context=None,
                                                     stacks="python")
        row: dict[str, Any] = {"case": case.name, "model": case.model, "seq_len": case.seq_len,
                               "micro_batch": case.micro_batch, "recompute": case.recompute,
                               "zero": case.zero, "optimizer": case.optimizer,
                               "layout": vc.layout.label,
                               "tied_embeddings": spec.tied_embeddings}
        start = time.monotonic()
        try:
            m = run_rank(0, 1, vc)
            row.update(measured=m.to_dict(), oom=None)
        except MeasuredOutOfMemory as exc:
            row.update(measured=None, oom=exc.details)
        except Exception as exc:  # noqa: BLE001 - one case's failure is its row, the grid goes on
            row.update(measured=None, oom=None,
                       error="".join(traceback.format_exception(exc))[-4000:])
            traceback.clear_frames(exc.__traceback__)
            if device == "cuda":
                torch.cuda.empty_cache()
        row["wall_s"] = round(time.monotonic() - start, 3)
        if record:
            traces[case.name] = _history_events(torch.cuda.memory._snapshot())
            torch.cuda.memory._record_memory_history(enabled=None)
        if device == "cuda" and case.name in profile and row["oom"] is None:
            kernels.append(_profile_case(vc, case.name))
        doc["rows"].append(row)
        write_json(out, doc)
        summary = _summary(row)
        print(f"[{i + 1}/{len(cases)} {time.monotonic() - t0:.0f}s] {case.name}: {summary}",
              flush=True)
    write_json(out, doc)
    if history_out is not None and traces:
        with gzip.open(history_out, "wt") as f:
            json.dump(traces, f)
    if profile_out is not None and kernels:
        profile_out.write_text("\n\n".join(kernels))
    return doc["rows"]


def _summary(row: dict[str, Any]) -> str:
    """One line for a case: its step and peaks, or why it has none."""
    m = row.get("measured")
    if "error" in row:
        return "error " + row["error"].strip().splitlines()[-1]
    if m is None:
        return "OOM " + json.dumps(row["oom"])
    alloc = max(p["allocated"] for p in m["peaks"].values())
    reserved = max(p["reserved"] or 0 for p in m["peaks"].values())
    return (f"step {min(m['step_s']):.3f} s, alloc {size_in(alloc, 'GiB', '.2f')}, "
            f"reserved {size_in(reserved, 'GiB', '.2f')}")


def _profile_case(vc: VerifyCase, name: str) -> str:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        try:
            run_rank(0, 1, VerifyCase(vc.spec, vc.layout, steps=1, warmup=1,
                                      optimizer=vc.optimizer, device=vc.device))
        except MeasuredOutOfMemory as exc:
            return f"## {name}\nOOM while profiling: {exc.details}"
    table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=40,
                                      max_name_column_width=90)
    return f"## {name} (warm-up step and one step)\n{table}"


def main(argv: list[str] | None = None) -> int:
    p = options.parser("python -m distlab.plan.verify.grid", __doc__)
    p.add_argument("--out", type=options.output_file, required=True,
                   help="JSON rows, rewritten after each case")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--cases", default=None,
                   help="semicolon-separated case names (default: the whole grid)")
    p.add_argument("--steps", type=options.positive_int, default=3, help="timed steps per case")
    p.add_argument("--warmup", type=options.nonnegative_int, default=1,
                   help="untimed steps first")
    p.add_argument("--allocator-limit-gib", type=options.positive_float, default=None,
                   help="cap what the caching allocator may reserve (GiB), as a smaller GPU "
                        "would (torch.cuda.set_per_process_memory_fraction)")
    p.add_argument("--limit-s", type=options.positive_float, default=1e9,
                   help="start no case after this many seconds")
    p.add_argument("--history", default="", help="semicolon-separated cases to record the "
                   "allocator's events of")
    p.add_argument("--history-out", type=options.output_file, default=None)
    p.add_argument("--profile", default="", help="semicolon-separated cases to profile")
    p.add_argument("--profile-out", type=options.output_file, default=None)
    args = p.parse_args(argv)
    try:
        cases = (tuple(parse_case(c) for c in args.cases.split(";") if c.strip())
                 if args.cases else DEFAULT_GRID)
    except ValueError as exc:
        options.fail(p, "--cases", args.cases, f"case names as the grid writes them ({exc})")
    for c in cases:
        if c.model not in PRESETS:
            options.fail(p, "--cases", c.model, f"one of {', '.join(sorted(PRESETS))}")
    split = lambda s: tuple(x.strip() for x in s.split(";") if x.strip())  # noqa: E731
    limit = (None if args.allocator_limit_gib is None
             else int(args.allocator_limit_gib * 2**30))
    run_grid(cases, args.out, device=args.device, steps=args.steps, warmup=args.warmup,
             memory_bytes=limit, limit_s=args.limit_s,
             history=split(args.history), history_out=args.history_out,
             profile=split(args.profile), profile_out=args.profile_out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
