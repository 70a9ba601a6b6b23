"""Rank functions used only by tests/zero (importable by spawned ranks)."""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel

from distlab.nets import mlp
from distlab.zero.measure import trace_zero_step, zero_memory_rank
from distlab.zero.optimizer import ZeroDataParallel

LR = 1e-2


def _train(step_fn: Any, model: Any, width: int, rank: int, steps: int) -> None:
    g = torch.Generator().manual_seed(7 + rank)
    for _ in range(steps):
        model(torch.randn(8, width, generator=g)).pow(2).mean().backward()
        step_fn()


def _torch_ddp(layers: int, width: int, rank: int, steps: int, zero: bool) -> list[torch.Tensor]:
    """torch DDP + Adam, or + torch's ZeroRedundancyOptimizer(Adam) when ``zero``."""
    m = DistributedDataParallel(mlp(layers, width, 0))
    opt: Any = (ZeroRedundancyOptimizer(m.parameters(), optimizer_class=torch.optim.Adam, lr=LR)
                if zero else torch.optim.Adam(m.parameters(), lr=LR))

    def step() -> None:
        opt.step()
        opt.zero_grad()
    _train(step, m, width, rank, steps)
    return [p.detach().clone() for p in m.module.parameters()]


def _ours(layers: int, width: int, rank: int, steps: int, stage: int,
          algorithm: str | None) -> list[torch.Tensor]:
    z = ZeroDataParallel(mlp(layers, width, 0), stage, lr=LR, bucket_cap_mb=0.002,
                         algorithm=algorithm)
    _train(z.step, z, width, rank, steps)
    return [p.detach().clone() for p in z.module.parameters()]


def _diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> dict[str, Any]:
    return {"equal": all(torch.equal(x, y) for x, y in zip(a, b, strict=True)),
            "max_abs": max(float((x - y).abs().max()) for x, y in zip(a, b, strict=True))}


def compare_and_measure(rank: int, world_size: int, steps: int = 3, layers: int = 3,
                        width: int = 32) -> dict[str, Any]:
    """Parameters after ``steps`` steps of every variant beside torch DDP + Adam (``vs_ddp``)
    and torch's ZeroRedundancyOptimizer (``vs_torch_zero``); then the memory rows of stages
    0-2 in fp32 and mixed precision (:func:`distlab.zero.measure.zero_memory_rank`)."""
    torch.set_num_threads(1)
    ddp = _torch_ddp(layers, width, rank, steps, zero=False)
    tz = _torch_ddp(layers, width, rank, steps, zero=True)
    ours = {f"stage{s}": _ours(layers, width, rank, steps, s, None) for s in (0, 1, 2)}
    ours["stage1-builtin"] = _ours(layers, width, rank, steps, 1, "builtin")
    ours["stage2-builtin"] = _ours(layers, width, rank, steps, 2, "builtin")
    out: dict[str, Any] = {"vs_ddp": {k: _diff(v, ddp) for k, v in ours.items()},
                           "torch_zero_vs_ddp": _diff(tz, ddp),
                           "vs_torch_zero": {k: _diff(v, tz) for k, v in ours.items()},
                           "stage1_vs_stage2": _diff(ours["stage1"], ours["stage2"])}
    out["memory"] = [r for prec in ("fp32", "mixed")
                     for r in zero_memory_rank(rank, world_size, [0, 1, 2], 4, 128, prec, 2,
                                               0.05)]
    return out


def recorder(errors: dict[str, str]) -> Any:
    """``attempt(name, fn)``: runs ``fn`` and records ``"Type: message"`` (or ``"no error"``)
    under ``name`` in ``errors``."""
    def attempt(name: str, fn: Any) -> None:
        try:
            fn()
            errors[name] = "no error"
        except Exception as exc:  # noqa: BLE001 - the type and message are the result
            errors[name] = f"{type(exc).__name__}: {exc}"
    return attempt


def timeline_and_errors(rank: int, world_size: int) -> dict[str, Any]:
    """The spans of one traced step of stages 0 and 1 (:func:`trace_zero_step`) and the
    exception type of each misuse of :class:`ZeroDataParallel`."""
    out: dict[str, Any] = {f"stage{s}": trace_zero_step(rank, world_size, s) for s in (0, 1)}
    errors: dict[str, str] = {}
    attempt = recorder(errors)

    attempt("stage -1", lambda: ZeroDataParallel(mlp(1, 4, 0), -1))
    attempt("cap 0", lambda: ZeroDataParallel(mlp(1, 4, 0), 1, bucket_cap_mb=0))
    attempt("not a module", lambda: ZeroDataParallel("model", 1))  # type: ignore[arg-type]
    z = ZeroDataParallel(mlp(1, 4, 0), 1)
    attempt("step before backward", z.step)
    out["errors"] = errors
    return out


def other_optimizers(rank: int, world_size: int, steps: int = 3, layers: int = 3,
                     width: int = 32) -> dict[str, dict[str, Any]]:
    """Stages 0-2 with SGD + momentum (a class and its kwargs) and AdamW (a factory) beside
    torch DDP with the same optimizer: ``{f"{optimizer} stage{s}": diff}``."""
    torch.set_num_threads(1)
    specs: dict[str, tuple[Any, Any]] = {
        "sgd": (torch.optim.SGD, {"lr": 0.05, "momentum": 0.9}),
        "adamw": (lambda ps: torch.optim.AdamW(ps, lr=LR, weight_decay=0.1), None)}
    out: dict[str, dict[str, Any]] = {}
    for name, (opt, kwargs) in specs.items():
        m = DistributedDataParallel(mlp(layers, width, 0))
        ref_opt = opt(m.parameters(), **kwargs) if kwargs else opt(list(m.parameters()))

        def step(o: Any = ref_opt) -> None:
            o.step()
            o.zero_grad()
        _train(step, m, width, rank, steps)
        ref = [p.detach().clone() for p in m.module.parameters()]
        for stage in (0, 1, 2):
            z = ZeroDataParallel(mlp(layers, width, 0), stage, bucket_cap_mb=0.002,
                                 optimizer=opt, optimizer_kwargs=kwargs)
            _train(z.step, z, width, rank, steps)
            out[f"{name} stage{stage}"] = _diff([p.detach().clone()
                                                 for p in z.module.parameters()], ref)
    return out
