"""Capture torch.profiler (Kineto) traces of DDP steps on a GPU, for notebook 06.

    python tools/gpu/ddp_trace.py OUTDIR          # needs CUDA; writes OUTDIR/ddp_trace_*.json

One process: NCCL with one rank (world size 1: DDP's buckets, hooks and the NCCL call path run,
the reduction has no peer) for torch DDP and distlab DDP, 8 x Linear(4096), batch 64, bucket cap
25 MB; three warm-up steps, then one profiled step each (CPU ops + CUDA kernels, so the compute
stream's backward kernels and any NCCL kernel land on their own lanes). Each trace is exported as
Kineto JSON with the rank in distributedInfo; distlab.trace.from_torch_profiler reads them.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile

from distlab.ddp import DDP
from distlab.nets import mlp


def main(out: Path) -> int:
    if not torch.cuda.is_available():
        print("needs a CUDA GPU: torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1)
    x = torch.randn(64, 4096, device="cuda")
    for name in ("torch", "distlab"):
        m = mlp(8, 4096, 0).cuda()
        w = DistributedDataParallel(m, device_ids=[0], bucket_cap_mb=25) if name == "torch" \
            else DDP(m, bucket_cap_mb=25)
        opt = torch.optim.SGD(w.parameters(), lr=1e-3)
        for _ in range(3):
            w(x).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            w(x).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            torch.cuda.synchronize()
        path = out / f"ddp_trace_{name}_nccl1.json"
        prof.export_chrome_trace(str(path))
        kernels = sum(1 for e in json.loads(path.read_text())["traceEvents"]
                      if e.get("cat") == "kernel")
        nccl = sum(1 for e in json.loads(path.read_text())["traceEvents"]
                   if e.get("cat") == "kernel" and "nccl" in e.get("name", "").lower())
        print(f"{name}: wrote {path} ({kernels} kernels, {nccl} NCCL kernels)")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("ddp_traces")))
