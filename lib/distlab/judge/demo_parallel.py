"""The rank functions that recorded the committed pipeline-parallel and FSDP gloo traces
(``results/traces/gloo_pp_1f1b_2ranks``, ``results/traces/gloo_fsdp2_2ranks``), and one command
that records both again::

    python -m distlab.judge.demo_parallel            # into results/traces/, with provenance.md
    python -m distlab.judge.demo_parallel --out /tmp/traces

- :func:`pipeline_demo_rank`: distlab's pipeline runtime (:mod:`distlab.pipeline_parallel.runtime`,
  ``PipelineStage`` + ``Schedule1F1B``) on CPU ranks over gloo: a seeded MLP cut into one stage
  per rank, ``microbatches`` microbatches per step, SGD. Every compute action is a
  ``PP:<stage><kind><microbatch>`` profiler span (``PP:0F1``, ``PP:1B3``), as torch's pipelining
  runtime names its actions.
- :func:`fsdp_demo_rank`: torch's FSDP2 (``fully_shard`` on a CPU mesh,
  ``init_device_mesh("cpu", (world,))``) of ``units`` Linear+ReLU blocks, each its own unit, the
  root wrapped too (it owns no parameters). FSDP2 annotates its work (``FSDP::all_gather (0)``,
  ``FSDP::pre_forward (0)``, ``FSDP::backward_prefetch for 1``...), which
  :mod:`distlab.judge.fsdp_exposure` reads.

Both are recorded with :func:`distlab.trace.record` (wait 1, warmup 1, ``steps`` profiled) and run
by :func:`distlab.launch.run`.
"""

from __future__ import annotations

import platform
import shutil
import sys
from pathlib import Path
from typing import Any

from distlab.cli import options
from distlab.cli.run import run_main

__all__ = ["PIPELINE", "FSDP", "fsdp_demo_rank", "main", "pipeline_demo_rank", "record_all"]

PIPELINE = "gloo_pp_1f1b_2ranks"
"""The committed pipeline trace folder's name."""
FSDP = "gloo_fsdp2_2ranks"
"""The committed FSDP trace folder's name."""


def pipeline_demo_rank(rank: int, world_size: int, out_dir: str, *, schedule: str = "1F1B",
                       microbatches: int = 4, layers: int = 4, width: int = 512,
                       batch: int = 128, steps: int = 3, timeout: float = 120.0) -> str:
    """Train ``wait + warmup + steps`` pipeline steps of ``schedule`` on this rank's stage,
    profiling the last ``steps``; returns ``out_dir``."""
    import torch
    from torch import nn

    from distlab.nets import mlp
    from distlab.pipeline_parallel.mlp_run import build_schedule, stage_layers, stage_module
    from distlab.pipeline_parallel.schedules.registry import build_plan
    from distlab.trace.record import record

    torch.set_num_threads(1)
    plan = build_plan(schedule, world_size, microbatches)
    model = mlp(layers, width, 0)
    cuts = stage_layers(layers, plan.num_stages)
    mine = {s: stage_module(model, cuts[s]) for s in plan.stages_of(rank)}
    sched = build_schedule("distlab", schedule, mine, plan.num_stages, microbatches,
                           nn.MSELoss(), timeout=timeout)
    params = [p for m in mine.values() for p in m.parameters()]
    opt = torch.optim.SGD(params, lr=1e-3)
    g = torch.Generator().manual_seed(1234)
    x, y = torch.randn(batch, width, generator=g), torch.randn(batch, width, generator=g)
    first, last = 0 in mine, plan.num_stages - 1 in mine
    with record(out_dir, steps=steps, wait=1, warmup=1, rank=rank) as prof:
        for _ in range(steps + 2):
            opt.zero_grad(set_to_none=True)
            sched.step(*((x,) if first else ()), target=y if last else None)
            opt.step()
            prof.step()
    return out_dir


def fsdp_demo_rank(rank: int, world_size: int, out_dir: str, *, units: int = 4,
                   width: int = 512, batch: int = 512, steps: int = 3) -> str:
    """Train ``wait + warmup + steps`` FSDP2 steps (``units`` Linear+ReLU blocks, each
    ``fully_shard``-ed, then the root), profiling the last ``steps``; returns ``out_dir``."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from distlab.trace.record import record

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(width, width),
                                                      torch.nn.ReLU()) for _ in range(units)])
    mesh = init_device_mesh("cpu", (world_size,))
    for block in model:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1234 + rank)
    x = torch.randn(batch, width, generator=g)
    with record(out_dir, steps=steps, wait=1, warmup=1, rank=rank) as prof:
        for _ in range(steps + 2):
            opt.zero_grad(set_to_none=True)
            model(x).square().mean().backward()
            opt.step()
            prof.step()
    return out_dir


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f
                         if line.startswith("model name")), platform.processor() or "cpu")
    except OSError:
        return platform.processor() or "cpu"


def _provenance(command: str, world_size: int, what: str) -> dict[str, Any]:
    import torch

    return {"command": command, "what": what, "world_size": world_size, "backend": "gloo",
            "torch": torch.__version__, "python": platform.python_version(),
            "machine": f"{platform.system()} {platform.machine()}, {_cpu_model()}",
            "cores": __import__("os").cpu_count()}


def record_all(out: str | Path = "results/traces", *, world_size: int = 2,
               timeout: float = 180.0) -> dict[str, Path]:
    """Record both demos into ``out``/:data:`PIPELINE` and ``out``/:data:`FSDP` (each folder
    emptied first), each with a ``provenance.md`` (not ``.json``:
    the judge reads every ``*.json`` of a folder as a trace); returns the folders."""
    from distlab import launch

    out = Path(out)
    folders = {PIPELINE: out / PIPELINE, FSDP: out / FSDP}
    whats = {PIPELINE: f"distlab PipelineStage + Schedule1F1B, {world_size} stages, "
                       "4 microbatches, MLP 4 x Linear(512)+ReLU, batch 128, SGD; "
                       "record(wait=1, warmup=1, steps=3)",
             FSDP: f"torch FSDP2 fully_shard on a CPU mesh of {world_size}, 4 units "
                   "Linear(512)+ReLU + root, batch 512, SGD; record(wait=1, warmup=1, steps=3)"}
    fns = {PIPELINE: pipeline_demo_rank, FSDP: fsdp_demo_rank}
    command = "python -m distlab.judge.demo_parallel " + " ".join(sys.argv[1:])
    for name, folder in folders.items():
        if folder.exists():
            shutil.rmtree(folder)
        launch.run(fns[name], world_size, args=(str(folder),), timeout=timeout)
        facts = _provenance(command.strip(), world_size, whats[name])
        (folder / "provenance.md").write_text(
            f"# {name}\n\n" + "".join(f"- {k}: {v}\n" for k, v in facts.items()))
    return folders


def _work(argv: list[str]) -> int:
    p = options.parser("python -m distlab.judge.demo_parallel", __doc__)
    p.add_argument("--out", default="results/traces", help="folder for the two trace folders")
    p.add_argument("--ranks", type=options.positive_int, default=2, help="gloo ranks")
    args = p.parse_args(argv)
    if args.ranks < 2:
        options.fail(p, "--ranks", args.ranks, "at least 2 (a pipeline of 2 stages)")
    for name, folder in record_all(args.out, world_size=args.ranks).items():
        print(f"{name}: {folder}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """The command: one line and exit 2 on bad input, one line and 130 on Ctrl-C."""
    return run_main("python -m distlab.judge.demo_parallel", _work, argv,
                    on_interrupt="the trace folders being written may be incomplete")


if __name__ == "__main__":
    sys.exit(main())
