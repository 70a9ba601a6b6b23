"""Rank functions for tests/ddp/test_ddp_join.py and tests/zero/test_zero_join.py: uneven inputs
under torch's Join, and without it (importable by spawned ranks)."""

from __future__ import annotations

import time
from typing import Any

from distlab.nets import mlp

WIDTH = 16


def _batches(rank: int, count: int, width: int = WIDTH) -> list[Any]:
    import torch
    g = torch.Generator().manual_seed(1000 + rank)
    return [torch.randn(4, width, generator=g) for _ in range(count)]


def _params(model: Any) -> list[Any]:
    return [p.detach().clone() for p in model.parameters()]


def _compare(a: list[Any], b: list[Any]) -> dict[str, Any]:
    import torch
    return {"equal": all(torch.equal(x, y) for x, y in zip(a, b, strict=True)),
            "max_diff": max(float((x - y).abs().max()) for x, y in zip(a, b, strict=True))}


def _torch_ddp_run(rank: int, counts: list[int], cfg: dict[str, Any], hook: Any) -> list[Any]:
    import torch
    from torch.distributed.algorithms import Join
    from torch.nn.parallel import DistributedDataParallel

    model = DistributedDataParallel(mlp(3, WIDTH, 100 + rank), bucket_cap_mb=cfg.get("cap", 0.001),
                                    gradient_as_bucket_view=cfg.get("view", False))
    if hook is not None:
        model.register_comm_hook(None, hook)
    opt = _optimizer(model, cfg)
    with Join([model], divide_by_initial_world_size=cfg.get("divide_initial", True)):
        _loop(model, opt, _batches(rank, counts[rank]), cfg)
    del torch
    return _params(model.module)


def _optimizer(model: Any, cfg: dict[str, Any]) -> Any:
    import torch
    if cfg.get("adam"):
        return torch.optim.Adam(model.parameters(), lr=1e-2)
    return torch.optim.SGD(model.parameters(), lr=0.1)


def _step(model: Any, opt: Any, x: Any) -> None:
    """One training step: a DDP with its optimizer, or a ZeroDataParallel (``opt`` None)."""
    model(x).pow(2).mean().backward()
    if opt is not None:
        opt.step()
        opt.zero_grad()
    else:
        model.step()


def _loop(model: Any, opt: Any, batches: list[Any], cfg: dict[str, Any]) -> None:
    for i, x in enumerate(batches):
        if cfg.get("no_sync_at") == i:
            with model.no_sync():
                model(x).pow(2).mean().backward()
            continue
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()


def ddp_join_compare(rank: int, world_size: int, counts: list[int],
                     cfg: dict[str, Any]) -> dict[str, Any]:
    """torch DDP under Join, then distlab DDP under Join, same weights, batches and flags; the
    final parameters compared (every rank ends with the last joiner's model)."""
    from torch.distributed.algorithms import Join

    from distlab.ddp import DDP
    from helpers.ddp_targets import _hooks

    torch_hook, our_hook = _hooks(cfg.get("hook"))
    ref = _torch_ddp_run(rank, counts, cfg, torch_hook)
    ours = DDP(mlp(3, WIDTH, 100 + rank), bucket_cap_mb=cfg.get("cap", 0.001),
               gradient_as_bucket_view=cfg.get("view", False), overlap=cfg.get("overlap", True),
               naive=cfg.get("naive", False), algorithm=cfg.get("algorithm", "builtin"))
    if our_hook is not None:
        ours.register_comm_hook(None, our_hook)
    opt = _optimizer(ours, cfg)
    join = Join([ours], divide_by_initial_world_size=cfg.get("divide_initial", True))
    with join:
        _loop(ours, opt, _batches(rank, counts[rank]), cfg)
    hook = join._join_hooks[0]
    final = _params(ours.module)
    return {**_compare(ref, final), "shadowed": hook.iterations,
            "shadow_count": ours.shadow_count, "last_joiner": ours.last_joiner,
            "buckets": len(ours.buckets), "checksum": float(sum(p.double().sum() for p in final))}


def ddp_join_compare_many(rank: int, world_size: int,
                          cases: list[tuple[list[int], dict[str, Any]]]) -> list[dict[str, Any]]:
    """:func:`ddp_join_compare` for each ``(counts, cfg)`` in one launch."""
    return [ddp_join_compare(rank, world_size, counts, cfg) for counts, cfg in cases]


def ddp_join_timeline(rank: int, world_size: int, counts: list[int]) -> dict[str, Any]:
    """Spans a traced distlab DDP records under Join: categories per lane on this rank."""
    import torch
    from torch.distributed.algorithms import Join

    from distlab.ddp import DDP
    from distlab.timeline import Timeline

    tl = Timeline()
    model = DDP(mlp(3, WIDTH, 100 + rank), bucket_cap_mb=0.001, timeline=tl)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with Join([model]):
        _loop(model, opt, _batches(rank, counts[rank]), {})
    cats: dict[str, int] = {}
    for span in tl.spans:
        key = f"{span.lane}:{span.category}"
        cats[key] = cats.get(key, 0) + 1
    return {"categories": cats, "buckets": len(model.buckets)}


def join_throws(rank: int, world_size: int, counts: list[int], which: str) -> str:
    """``throw_on_early_termination=True``: the message every rank raises."""
    import torch
    from torch.distributed.algorithms import Join

    from distlab.ddp import DDP
    from distlab.zero import ZeroDataParallel

    if which == "ddp":
        model: Any = DDP(mlp(3, WIDTH, 100 + rank))
        opt: Any = torch.optim.SGD(model.parameters(), lr=0.1)
    else:
        model = ZeroDataParallel(mlp(3, WIDTH, 100 + rank), stage=1, algorithm="builtin")
        opt = None
    try:
        with Join([model], throw_on_early_termination=True):
            for x in _batches(rank, counts[rank]):
                _step(model, opt, x)
    except RuntimeError as exc:
        return str(exc)
    return "no error"


# ---- without Join: a bounded wait, then an error on every rank ------------------------------

def uneven_without_join(rank: int, world_size: int, counts: list[int], which: str,
                        timeout: float) -> dict[str, Any]:
    """Train on ``counts[rank]`` batches without Join, then ``dist.barrier()`` as at the end of an
    epoch; return what this rank raised (type, message) and after how many seconds. Every rank
    then tears its process groups down, as a process that ends does, so its connections close."""
    import torch
    import torch.distributed as dist

    from distlab.ddp import DDP
    from distlab.zero import ZeroDataParallel

    outcome: dict[str, Any] = {"rank": rank, "error": None, "where": "loop"}
    if which == "ddp":
        model: Any = DDP(mlp(3, WIDTH, 100 + rank), timeout=timeout)
        opt: Any = torch.optim.SGD(model.parameters(), lr=0.1)
    else:
        model = ZeroDataParallel(mlp(3, WIDTH, 100 + rank), stage=int(which[4]),
                                 timeout=timeout,
                                 algorithm=None if "plan" in which else "builtin")
        opt = None
    t0 = time.monotonic()
    try:
        for x in _batches(rank, counts[rank]):
            _step(model, opt, x)
        outcome["where"] = "barrier"
        dist.barrier()
    except Exception as exc:  # the point: what each rank raises
        outcome["error"] = type(exc).__name__
        outcome["message"] = str(exc)
    outcome["seconds"] = time.monotonic() - t0
    dist.destroy_process_group()
    return outcome


# ---- ZeroDataParallel under Join against torch DDP + Adam (and + ZeroRedundancyOptimizer) ----

def zero_join_compare(rank: int, world_size: int, counts: list[int],
                      cfg: dict[str, Any]) -> dict[str, Any]:
    """torch DDP + Adam under Join, torch DDP + ZeroRedundancyOptimizer(Adam) under
    Join([ddp, zero]), and distlab's ZeroDataParallel(stage) under Join: final parameters."""
    import torch
    from torch.distributed.algorithms import Join
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel

    from distlab.zero import ZeroDataParallel

    divide = cfg.get("divide_initial", True)
    out: dict[str, Any] = {}
    for kind in ("adam", "zero_optimizer"):
        ddp = DistributedDataParallel(mlp(3, WIDTH, 100 + rank))
        if kind == "adam":
            opt: Any = torch.optim.Adam(ddp.parameters(), lr=1e-2)
            joinables: list[Any] = [ddp]
        else:
            opt = ZeroRedundancyOptimizer(ddp.parameters(), torch.optim.Adam, lr=1e-2)
            joinables = [ddp, opt]
        with Join(joinables, divide_by_initial_world_size=divide):
            for x in _batches(rank, counts[rank]):
                ddp(x).pow(2).mean().backward()
                opt.step()
                opt.zero_grad()
        out[kind] = _params(ddp.module)
    zdp = ZeroDataParallel(mlp(3, WIDTH, 100 + rank), stage=cfg["stage"], lr=1e-2,
                           algorithm=cfg.get("algorithm", "builtin"),
                           bucket_cap_mb=cfg.get("cap", 25.0))
    join = Join([zdp], divide_by_initial_world_size=divide)
    with join:
        for x in _batches(rank, counts[rank]):
            zdp(x).pow(2).mean().backward()
            zdp.step()
    ours = _params(zdp.module)
    return {"vs_adam": _compare(out["adam"], ours),
            "vs_zero_optimizer": _compare(out["zero_optimizer"], ours),
            "torch_pair": _compare(out["adam"], out["zero_optimizer"]),
            "shadowed": join._join_hooks[0].iterations, "last_joiner": zdp.last_joiner,
            "checksum": float(sum(p.double().sum() for p in ours))}


def zero_join_compare_many(rank: int, world_size: int,
                           cases: list[tuple[list[int], dict[str, Any]]]) -> list[dict[str, Any]]:
    """:func:`zero_join_compare` for each ``(counts, cfg)`` in one launch."""
    return [zero_join_compare(rank, world_size, counts, cfg) for counts, cfg in cases]
