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

import argparse
import datetime
import gzip
import json
import os
import platform
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from distlab.plan.layout import Layout
from distlab.plan.model import PRESETS, model_spec
from distlab.plan.verify.rank import MeasuredOutOfMemory, VerifyCase, run_rank

__all__ = ["DEFAULT_GRID", "TOO_BIG", "GridCase", "main", "parse_case", "run_grid"]


@dataclass(frozen=True)
class GridCase:
    """One run of the grid: a preset at ``seq_len`` tokens, ``micro_batch`` sequences (one
    microbatch per step), ``recompute``, ZeRO ``zero`` (3: FSDP2; 0: the model alone under
    autocast) and the AdamW ``optimizer``."""

    model: str
    seq_len: int
    micro_batch: int
    recompute: str = "none"
    zero: int = 3
    optimizer: str = "fused"

    @property
    def name(self) -> str:
        """E.g. ``"llama3.2-1b s4096 mb2 full"`` (``zero0``, ``foreach`` when not default)."""
        parts = [self.model, f"s{self.seq_len}", f"mb{self.micro_batch}", self.recompute]
        if self.zero != 3:
            parts.append(f"zero{self.zero}")
        if self.optimizer != "fused":
            parts.append(self.optimizer)
        return " ".join(parts)

    def layout(self) -> Layout:
        """The planner's :class:`~distlab.plan.layout.Layout` of this run."""
        return Layout(dp=1, zero=self.zero, micro_batch=self.micro_batch,
                      global_batch=self.micro_batch, recompute=self.recompute,
                      precision="fsdp-mixed")


def parse_case(text: str) -> GridCase:
    """A :class:`GridCase` from its :attr:`GridCase.name`."""
    words = text.split()
    if len(words) < 4 or not words[1].startswith("s") or not words[2].startswith("mb"):
        raise ValueError(f"case {text!r}: expected 'MODEL sSEQ mbN RECOMPUTE [zeroZ] "
                         "[foreach]'")
    zero, optimizer = 3, "fused"
    for w in words[4:]:
        if w.startswith("zero"):
            zero = int(w[4:])
        elif w in ("fused", "foreach"):
            optimizer = w
        else:
            raise ValueError(f"case {text!r}: unknown word {w!r}")
    return GridCase(words[0], int(words[1][1:]), int(words[2][2:]), words[3], zero, optimizer)


def _grid() -> tuple[GridCase, ...]:
    out: list[GridCase] = []
    for model, seqs in (("llama3.2-1b", ((4096, (1, 2, 4)), (8192, (1, 2)))),
                        ("llama3.2-3b", ((4096, (1, 2, 4)), (8192, (2,))))):
        for seq, mbs in seqs:
            for mb in mbs:
                for rc in ("none", "op", "full"):
                    out.append(GridCase(model, seq, mb, rc))
    out += [GridCase("llama3.2-1b", 2048, 8, "none"), GridCase("llama3.2-1b", 2048, 8, "full"),
            GridCase("llama3.2-1b", 4096, 2, "none", zero=0),
            GridCase("llama3.2-1b", 4096, 2, "full", zero=0),
            GridCase("llama3.2-1b", 4096, 2, "full", optimizer="foreach"),
            GridCase("llama3.2-1b", 4096, 2, "none", optimizer="foreach")]
    return tuple(out)


DEFAULT_GRID = _grid()
"""Llama 3.2 1B and 3B at 4k and 8k tokens, micro-batches 1-4, recompute none / per-op /
full, FSDP2 on one GPU; a few with ZeRO 0 (autocast, no FSDP) and foreach AdamW."""

TOO_BIG = (GridCase("llama3-8b", 2048, 1, "op"), GridCase("llama3-8b", 4096, 1, "full"))
"""Llama 3 8B on one GPU: its fp32 states alone take 120 GiB, so an 80 GB card cannot hold it
and a 141 GB one only barely (the planner's verdict checked where a run fails)."""


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
    traces: dict[str, Any] = {}
    kernels: list[str] = []
    for i, case in enumerate(cases):
        if time.monotonic() - t0 > limit_s:
            doc["stopped"] = f"--limit-s {limit_s:g} reached before {case.name}"
            break
        spec = model_spec(case.model, seq_len=case.seq_len)
        vc = VerifyCase(spec, case.layout(), steps=steps, optimizer=case.optimizer,
                        device=device)
        record = device == "cuda" and case.name in history
        if record:
            torch.cuda.memory._record_memory_history(max_entries=2_000_000, context=None,
                                                     stacks="python")
        row: dict[str, Any] = {"case": case.name, "model": case.model, "seq_len": case.seq_len,
                               "micro_batch": case.micro_batch, "recompute": case.recompute,
                               "zero": case.zero, "optimizer": case.optimizer,
                               "layout": vc.layout.label}
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
        out.write_text(json.dumps(doc, indent=1))
        m_ = row.get("measured")
        summary = ("error " + row["error"].strip().splitlines()[-1] if "error" in row else
                   "OOM " + json.dumps(row["oom"]) if m_ is None else
                   f"step {min(m_['step_s']):.3f} s, alloc "
                   f"{max(p['allocated'] for p in m_['peaks'].values()) / 2**30:.2f} GiB, "
                   f"reserved {max((p['reserved'] or 0) for p in m_['peaks'].values()) / 2**30:.2f}"
                   " GiB")
        print(f"[{i + 1}/{len(cases)} {time.monotonic() - t0:.0f}s] {case.name}: {summary}",
              flush=True)
    out.write_text(json.dumps(doc, indent=1))
    if history_out is not None and traces:
        with gzip.open(history_out, "wt") as f:
            json.dump(traces, f)
    if profile_out is not None and kernels:
        profile_out.write_text("\n\n".join(kernels))
    return doc["rows"]


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
    p = argparse.ArgumentParser(prog="python -m distlab.plan.verify.grid",
                                description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="JSON rows, rewritten after each case")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--cases", default=None,
                   help="semicolon-separated case names (default: the whole grid)")
    p.add_argument("--steps", type=int, default=3, help="timed steps per case (default 3)")
    p.add_argument("--limit-s", type=float, default=1e9, help="start no case after this")
    p.add_argument("--history", default="", help="semicolon-separated cases to record the "
                   "allocator's events of")
    p.add_argument("--history-out", type=Path, default=None)
    p.add_argument("--profile", default="", help="semicolon-separated cases to profile")
    p.add_argument("--profile-out", type=Path, default=None)
    args = p.parse_args(argv)
    cases = (tuple(parse_case(c) for c in args.cases.split(";") if c.strip())
             if args.cases else DEFAULT_GRID)
    for c in cases:
        if c.model not in PRESETS:
            p.error(f"unknown model {c.model!r}")
    split = lambda s: tuple(x.strip() for x in s.split(";") if x.strip())  # noqa: E731
    run_grid(cases, args.out, device=args.device, steps=args.steps, limit_s=args.limit_s,
             history=split(args.history), history_out=args.history_out,
             profile=split(args.profile), profile_out=args.profile_out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
