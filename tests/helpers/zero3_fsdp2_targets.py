"""Rank functions of tests/zero/test_zero_fsdp2_scenarios.py: torch FSDP2's own training
scenarios (test_fully_shard_training / _frozen / _mixed_precision / _state_dict) run on
``fully_shard`` and on ``ZeroDataParallel(stage=3)`` from the same weights on the same batches;
one launch runs them all (process start-up dominates on small machines)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

from distlab.nets import mlp
from distlab.zero.fsdp2_check import cpu_mesh, state_diff
from distlab.zero.optimizer import ZeroDataParallel
from helpers.zero_targets import recorder

WIDTH = 16
Forward = Callable[[torch.nn.Module, torch.Tensor], torch.Tensor]


def _full(m: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return m(x)


def _first(m: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return m[0](x)  # type: ignore[index]


class Pair(torch.nn.Module):
    """One unit of two Linears; ``b`` is skipped when ``both`` is False (parameters of a unit
    that get no gradient while the unit's others do)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.a = torch.nn.Linear(width, width)
        self.b = torch.nn.Linear(width, width)

    def forward(self, x: torch.Tensor, both: bool) -> torch.Tensor:
        y = torch.relu(self.a(x))
        return y + self.b(y) if both else y


class Branchy(torch.nn.Module):
    """first -> pair -> (spare) -> head; ``mode`` 0 runs everything, 1 skips ``pair.b`` and the
    ``spare`` unit, 2 skips ``spare`` only."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(5)
        self.first = torch.nn.Linear(WIDTH, WIDTH)
        self.pair = Pair(WIDTH)
        self.spare = torch.nn.Linear(WIDTH, WIDTH)
        self.head = torch.nn.Linear(WIDTH, 4)

    def forward(self, x: torch.Tensor, mode: int = 0) -> torch.Tensor:
        x = self.pair(torch.relu(self.first(x)), mode != 1)
        if mode == 0:
            x = torch.relu(self.spare(x))
        return self.head(x)


class Twice(torch.nn.Module):
    """A block called twice per forward, a frozen Linear, a tied pair inside one unit."""

    def __init__(self, frozen: bool) -> None:
        super().__init__()
        torch.manual_seed(6)
        self.block = torch.nn.Linear(WIDTH, WIDTH)
        self.frozen = torch.nn.Linear(WIDTH, WIDTH)
        self.tied = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH),
                                        torch.nn.Linear(WIDTH, WIDTH))
        self.tied[1].weight = self.tied[0].weight
        self.norm = torch.nn.BatchNorm1d(WIDTH)
        if frozen:
            self.frozen.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.block(torch.relu(self.block(x))))
        x = self.norm(self.frozen(x))
        return self.tied(x)


def _twice_units(m: torch.nn.Module) -> list[torch.nn.Module]:
    return [m.block, m.tied, m.norm]  # type: ignore[list-item]


class Tiny(torch.nn.Module):
    """A two-layer transformer encoder on a linear embedding (FSDP2's transformer tests, small)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(8)
        self.embed = torch.nn.Linear(WIDTH, WIDTH)
        self.layers = torch.nn.ModuleList(
            torch.nn.TransformerEncoderLayer(WIDTH, 2, 32, dropout=0.0, batch_first=True)
            for _ in range(2))
        self.out = torch.nn.Linear(WIDTH, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x.view(x.shape[0], 2, WIDTH))
        for layer in self.layers:
            x = layer(x)
        return self.out(x)


def _tiny_units(m: torch.nn.Module) -> list[torch.nn.Module]:
    return list(m.layers)  # type: ignore[arg-type]


@dataclass
class Scenario:
    """A model, its units, an optimizer, a mixed-precision policy and the steps: per step the
    microbatches ``(forward, gradient sync)`` run before the optimizer steps."""

    model: Callable[[], torch.nn.Module]
    units: Callable[[torch.nn.Module], list[torch.nn.Module]] | None = None
    optimizer: tuple[type[torch.optim.Optimizer], dict[str, Any]] = (torch.optim.Adam,
                                                                     {"lr": 1e-2})
    param_dtype: torch.dtype | None = None
    reduce_dtype: torch.dtype | None = None
    steps: list[list[tuple[Forward, bool]]] = field(
        default_factory=lambda: [[(_full, True)]] * 4)
    options: dict[str, Any] = field(default_factory=dict)
    batch: int = 4
    inputs: int = WIDTH


def _mode(k: int) -> Forward:
    return lambda m, x: m(x, k)


def _default_units(m: torch.nn.Module) -> list[torch.nn.Module]:
    return [c for c in m.modules()
            if c is not m and any(p.requires_grad for p in c.parameters(recurse=False))]


SGD_M = (torch.optim.SGD, {"lr": 0.05, "momentum": 0.9})
ADAMW = (torch.optim.AdamW, {"lr": 1e-2, "weight_decay": 0.1})
ACCUM = [[(_full, True), (_full, True), (_full, True)]] * 2
NOSYNC = [[(_full, False), (_full, False), (_full, True)]] * 2

SCENARIOS: dict[str, Scenario] = {
    "sgd momentum": Scenario(lambda: mlp(3, WIDTH, 0), optimizer=SGD_M),
    "adamw": Scenario(lambda: mlp(3, WIDTH, 0), optimizer=ADAMW),
    "adam one unit (root)": Scenario(lambda: mlp(2, WIDTH, 0), units=lambda m: []),
    "accumulate, sync every microbatch": Scenario(lambda: mlp(3, WIDTH, 0), steps=ACCUM),
    "accumulate, sync on the last": Scenario(lambda: mlp(3, WIDTH, 0), steps=NOSYNC,
                                             optimizer=SGD_M),
    "accumulate, sync on the last, prefetch 0": Scenario(lambda: mlp(3, WIDTH, 0),
                                                         steps=NOSYNC,
                                                         options={"prefetch": 0}),
    "unused parameters and units": Scenario(
        Branchy, steps=[[(_mode(0), True)], [(_mode(1), True)], [(_mode(0), True)],
                        [(_mode(2), True)], [(_mode(1), False), (_mode(2), True)]]),
    "partial forward (model[0] only)": Scenario(
        lambda: mlp(3, WIDTH, 0), steps=[[(_full, True)], [(_first, True)], [(_full, True)],
                                         [(_first, True)]]),
    "module twice, frozen, tied in a unit, batch norm": Scenario(
        lambda: Twice(frozen=True), units=_twice_units, options={"prefetch": 2}),
    "transformer": Scenario(Tiny, units=_tiny_units, optimizer=ADAMW, inputs=2 * WIDTH),
    "mixed bf16, reduce fp32": Scenario(lambda: mlp(3, WIDTH, 0),
                                        param_dtype=torch.bfloat16,
                                        reduce_dtype=torch.float32),
    "mixed bf16, reduce bf16": Scenario(lambda: mlp(3, WIDTH, 0),
                                        param_dtype=torch.bfloat16),
    "mixed bf16, reduce fp32, sync on the last": Scenario(
        lambda: mlp(3, WIDTH, 0), param_dtype=torch.bfloat16, reduce_dtype=torch.float32,
        steps=NOSYNC, optimizer=SGD_M),
}


def _batches(s: Scenario, rank: int) -> list[list[torch.Tensor]]:
    g = torch.Generator().manual_seed(21 + rank)
    return [[torch.randn(s.batch, s.inputs, generator=g) for _ in step] for step in s.steps]


def _loss(out: torch.Tensor) -> torch.Tensor:
    return out.float().pow(2).mean()


def _fsdp2(s: Scenario, batches: list[list[torch.Tensor]]) -> tuple[dict[str, torch.Tensor],
                                                                     dict[str, int]]:
    m = s.model()
    mp = MixedPrecisionPolicy(param_dtype=s.param_dtype, reduce_dtype=s.reduce_dtype)
    mesh = cpu_mesh()   # on a GPU machine too: the scenarios compare on gloo CPU ranks
    for u in (s.units or _default_units)(m):
        fully_shard(u, mesh=mesh, mp_policy=mp)
    fully_shard(m, mesh=mesh, mp_policy=mp)
    cls, kwargs = s.optimizer
    opt = cls(m.parameters(), **kwargs)
    for step, xs in zip(s.steps, batches, strict=True):
        for (fwd, sync), x in zip(step, xs, strict=True):
            m.set_requires_gradient_sync(sync)  # type: ignore[operator]
            _loss(fwd(m, x)).backward()
        opt.step()
        opt.zero_grad()
    names = {id(p): n for n, p in m.named_parameters()}
    counts = {names[id(p)]: int(st["step"]) for p, st in opt.state.items() if "step" in st}
    sd = {k: v.full_tensor() if isinstance(v, DTensor) else v.detach().clone()
          for k, v in m.state_dict().items()}
    return sd, counts


def _zero(s: Scenario, batches: list[list[torch.Tensor]]) -> tuple[dict[str, torch.Tensor],
                                                                    dict[str, int]]:
    m = s.model()
    cls, kwargs = s.optimizer
    z = ZeroDataParallel(m, 3, units=s.units(m) if s.units else None, optimizer=cls,
                         optimizer_kwargs=kwargs, param_dtype=s.param_dtype,
                         reduce_dtype=s.reduce_dtype, **s.options)
    for step, xs in zip(s.steps, batches, strict=True):
        for (fwd, sync), x in zip(step, xs, strict=True):
            z.set_requires_gradient_sync(sync)
            _loss(fwd(z.module, x)).backward()
        z.step()
    names = {id(p): n for n, p in m.named_parameters()}
    stage3 = z._stage3
    assert stage3 is not None
    counts = {names[id(p)]: int(z.optimizer.state[piece]["step"])
              for u in stage3.units for p, piece in zip(u.params, u.pieces, strict=True)
              if "step" in z.optimizer.state.get(piece, {})}
    sd = z.state_dict()
    z.close()
    return sd, counts


def scenarios_rank(rank: int, world_size: int, names: list[str] | None = None
                   ) -> dict[str, dict[str, Any]]:
    """Every scenario (or ``names``): ``state_diff`` of ZeRO-3's state dict against FSDP2's
    (``names``: the same keys in the same order, buffers and tied aliases included), whether
    the optimizer stepped each parameter as often (``steps_equal``, and the counts), and the
    largest value of any parameter of FSDP2's (``scale``)."""
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message=".*returned a view tensor")
    out: dict[str, dict[str, Any]] = {}
    for name in names or list(SCENARIOS):
        s = SCENARIOS[name]
        batches = _batches(s, rank)
        start = s.model().state_dict()
        ref, ref_counts = _fsdp2(s, batches)
        ours, counts = _zero(s, batches)
        d = state_diff({k: v.float() for k, v in ours.items()},
                       {k: v.float() for k, v in ref.items()})
        d["per_key"] = {k: float((ours[k].float() - ref[k].float()).abs().max()) for k in ref}
        d["moved"] = {k: float((ref[k].float() - start[k].float()).abs().max()) for k in ref}
        d["dtypes"] = all(ours[k].dtype == ref[k].dtype for k in ref)
        if name == "transformer":   # the query and value thirds of the attention biases
            d["qv_bias_max_abs"] = max(
                float((ours[k].float() - ref[k].float())[third].abs().max())
                for k in ref if k.endswith("in_proj_bias")
                for third in (slice(0, WIDTH), slice(2 * WIDTH, 3 * WIDTH)))
        d["steps_equal"] = counts == ref_counts
        d["counts"] = ref_counts
        out[name] = d
    return out


def save_trained(rank: int, world_size: int, path: str) -> dict[str, Any]:
    """Train :class:`Twice` (frozen parameter, tied pair, batch norm) for 3 steps at stage 3;
    rank 0 saves its state dict to ``path``; every rank returns the keys."""
    torch.set_num_threads(1)
    m = Twice(frozen=True)
    z = ZeroDataParallel(m, 3, units=_twice_units(m), optimizer=torch.optim.SGD,
                         optimizer_kwargs={"lr": 0.1, "momentum": 0.9})
    g = torch.Generator().manual_seed(rank)
    for _ in range(3):
        _loss(z(torch.randn(4, WIDTH, generator=g))).backward()
        z.step()
    sd = z.state_dict()
    if rank == 0:
        torch.save(sd, path)
    z.close()
    return {"keys": list(sd), "plain_keys": list(Twice(frozen=True).state_dict())}


def load_elsewhere(rank: int, world_size: int, path: str) -> dict[str, Any]:
    """Load the saved state dict into a plain module and into stage 3 (and stage 1) on this
    world size: the state dicts read back, and the outputs on one batch, against the plain
    module's; then a misuse of each kind."""
    torch.set_num_threads(1)
    saved = torch.load(path)
    plain = Twice(frozen=True)
    plain.load_state_dict(saved)
    plain.eval()
    x = torch.randn(4, WIDTH, generator=torch.Generator().manual_seed(99))
    want = plain(x).detach()
    out: dict[str, Any] = {}
    for stage in (3, 1):
        m = Twice(frozen=True)
        z = ZeroDataParallel(m, stage, units=_twice_units(m) if stage == 3 else None)
        z.load_state_dict(saved)
        back = z.state_dict()
        m.eval()
        with torch.no_grad():
            got = z(x)
        out[f"stage{stage}"] = {"state": state_diff({k: v.float() for k, v in back.items()},
                                                    {k: v.float() for k, v in saved.items()}),
                                "output_equal": bool(torch.equal(got, want)),
                                "tied": back["tied.1.weight"].equal(back["tied.0.weight"])}
        if stage == 3:
            errors: dict[str, str] = {}
            attempt = recorder(errors)
            attempt("missing key", lambda z=z: z.load_state_dict(
                {k: v for k, v in saved.items() if k != "norm.running_mean"}))
            attempt("wrong shape", lambda z=z: z.load_state_dict(
                {**saved, "block.bias": torch.zeros(3)}))
            out["errors"] = errors
        z.close()
    return out


def misuse_rank(rank: int, world_size: int) -> dict[str, str]:
    """The exception (``Type: message``) of each misuse of the options added beside FSDP2's."""
    errors: dict[str, str] = {}
    attempt = recorder(errors)
    attempt("lr with optimizer", lambda: ZeroDataParallel(
        mlp(1, 4, 0), 3, lr=0.1, optimizer=torch.optim.SGD))
    attempt("not an optimizer", lambda: ZeroDataParallel(mlp(1, 4, 0), 3, optimizer=dict))
    attempt("factory returns junk", lambda: ZeroDataParallel(mlp(1, 4, 0), 3,
                                                             optimizer=lambda ps: 3))
    attempt("kwargs without optimizer", lambda: ZeroDataParallel(
        mlp(1, 4, 0), 3, optimizer_kwargs={"lr": 1.0}))
    attempt("reduce_dtype at stage 1", lambda: ZeroDataParallel(
        mlp(1, 4, 0), 1, reduce_dtype=torch.float32))
    attempt("param_dtype not a dtype", lambda: ZeroDataParallel(mlp(1, 4, 0), 3,
                                                                param_dtype="bf16"))
    z1 = ZeroDataParallel(mlp(1, 4, 0), 1)
    attempt("sync flag not a bool", lambda: z1.set_requires_gradient_sync("no"))
    x = torch.ones(2, 4)
    z1(x).sum().backward()
    attempt("second backward at stage 1", lambda: z1(x).sum().backward())

    def accumulate_after_the_reduce() -> None:
        with z1.no_sync():
            z1(x).sum().backward()
    attempt("no_sync backward after the reduce at stage 1", accumulate_after_the_reduce)
    z3 = ZeroDataParallel(mlp(2, 4, 0), 3)
    attempt("step before backward", z3.step)
    with z3.no_sync():
        z3(x).sum().backward()
    attempt("step after sync-off backward only", z3.step)
    z3.close()
    return errors
