"""Rank functions used only by tests/zero/test_zero_stage3*.py (importable by spawned ranks)."""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.fsdp import fully_shard

from distlab.nets import mlp
from distlab.timeline import Timeline
from distlab.zero.optimizer import ZeroDataParallel

LR = 1e-2
WIDTH = 24


class Block(torch.nn.Module):
    """Linear + LayerNorm: a unit with two modules' parameters in it."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(width, width)
        self.norm = torch.nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.norm(self.lin(x)))


class Net(torch.nn.Module):
    """Two blocks, a head, and a parameter of the root's own (a scale)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.blocks = torch.nn.ModuleList([Block(width), Block(width)])
        self.head = torch.nn.Linear(width, 5)
        self.scale = torch.nn.Parameter(torch.ones(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return self.head(x) * self.scale


def _model(kind: str) -> torch.nn.Module:
    return mlp(3, WIDTH, 0) if kind == "mlp" else Net(WIDTH)


def _units(kind: str, m: torch.nn.Module) -> list[torch.nn.Module] | None:
    """The units: every module with parameters of its own (mlp), or the two blocks (net)."""
    return None if kind == "mlp" else list(m.blocks)  # type: ignore[union-attr]


def _batches(rank: int, steps: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(11 + rank)
    return [torch.randn(6, WIDTH, generator=g) for _ in range(steps)]


def _fsdp2(kind: str, rank: int, steps: int) -> dict[str, torch.Tensor]:
    m = _model(kind)
    units = _units(kind, m)
    for sub in (units if units is not None
                else [s for s in m.modules() if s is not m
                      and any(True for _ in s.parameters(recurse=False))]):
        fully_shard(sub)
    fully_shard(m)
    opt = torch.optim.Adam(m.parameters(), lr=LR)
    for x in _batches(rank, steps):
        m(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    return {n: p.full_tensor().detach().clone() for n, p in m.named_parameters()}


def _ours(kind: str, rank: int, steps: int, stage: int, **kw: Any) -> dict[str, torch.Tensor]:
    m = _model(kind)
    z = ZeroDataParallel(m, stage, lr=LR, bucket_cap_mb=0.002,
                         units=_units(kind, m) if stage == 3 else None, **kw)
    for x in _batches(rank, steps):
        z(x).pow(2).mean().backward()
        z.step()
    out = z.full_state_dict()
    z.close()
    return out


def _diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> dict[str, Any]:
    return {"names": list(a) == list(b),
            "equal": all(torch.equal(a[k], b[k]) for k in b),
            "max_abs": max(float((a[k] - b[k]).abs().max()) for k in b)}


def compare_with_fsdp2(rank: int, world_size: int, steps: int = 3) -> dict[str, Any]:
    """Parameters after ``steps`` Adam steps: stage 3 (prefetch 0, 1, 2; distlab's plans and
    builtin) and stages 0-2 against torch FSDP2 with the same units, for an MLP (every Linear a
    unit) and a net whose units are two blocks and the root."""
    torch.set_num_threads(1)
    out: dict[str, Any] = {}
    for kind in ("mlp", "net"):
        ref = _fsdp2(kind, rank, steps)
        runs = {"stage3": _ours(kind, rank, steps, 3),
                "stage3 prefetch 0": _ours(kind, rank, steps, 3, prefetch=0),
                "stage3 prefetch 2 builtin": _ours(kind, rank, steps, 3, prefetch=2,
                                                   algorithm="builtin")}
        runs.update({f"stage{s}": _ours(kind, rank, steps, s) for s in (0, 1, 2)})
        out[kind] = {name: _diff(sd, ref) for name, sd in runs.items()}
        out[kind]["stage3 vs stage1"] = _diff(runs["stage3"], runs["stage1"])
    return out


def traced_steps(rank: int, world_size: int, prefetch: int) -> dict[str, Any]:
    """The spans of the second of two stage-3 steps on a 4-Linear MLP."""
    torch.set_num_threads(1)
    z = ZeroDataParallel(mlp(4, 64, 0), 3, prefetch=prefetch)
    for step, x in enumerate(_batches(rank, 2)):
        z.timeline = Timeline() if step == 1 else None
        z(torch.nn.functional.pad(x, (0, 64 - WIDTH))).pow(2).mean().backward()
        z.step()
    assert z.timeline is not None
    spans = z.timeline.to_dicts()
    z.close()
    return {"spans": spans}


def misuse(rank: int, world_size: int) -> dict[str, str]:
    """The exception (type: message) of each misuse of stage 3."""
    errors: dict[str, str] = {}

    def attempt(name: str, fn: Any) -> None:
        try:
            fn()
            errors[name] = "no error"
        except Exception as exc:  # noqa: BLE001 - the type and message are the result
            errors[name] = f"{type(exc).__name__}: {exc}"

    m = mlp(2, 4, 0)
    attempt("units at stage 1", lambda: ZeroDataParallel(m, 1, units=[m[0]]))
    attempt("prefetch -1", lambda: ZeroDataParallel(mlp(1, 4, 0), 3, prefetch=-1))
    attempt("foreign unit", lambda: ZeroDataParallel(mlp(1, 4, 0), 3,
                                                     units=[torch.nn.Linear(2, 2)]))
    shared = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    shared[1].weight = shared[0].weight
    attempt("shared parameter", lambda: ZeroDataParallel(shared, 3, units=[shared[0],
                                                                           shared[1]]))
    z = ZeroDataParallel(mlp(2, 4, 0), 3)
    attempt("step before backward", z.step)
    from torch.distributed.algorithms.join import Join
    attempt("join", lambda: Join([z]))
    z.close()
    return errors
