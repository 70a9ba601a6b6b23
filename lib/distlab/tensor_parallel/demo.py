"""One MLP block split by tensor parallelism on real gloo ranks, checked against one process.

    from distlab.tensor_parallel.demo import run_mlp_tensor_parallel
    run = run_mlp_tensor_parallel(ranks=2, hidden=64, seq_len=8, micro_batch=2)
    print("\\n".join(run.summary_lines()))

The block is a transformer's MLP: ``Linear(h, 4h)``, GeLU, ``Linear(4h, h)`` (:class:`MLPBlock`),
and with sequence parallelism a ``LayerNorm(h)`` before it (:class:`NormMLP`). Each case runs on
every rank: the seeded module is split by :func:`~distlab.tensor_parallel.parallelize_module`
with Megatron's plan (:func:`tp_plan`: the first linear column-parallel, the second
row-parallel; with sequence parallelism the norm ``SequenceParallel``, the first linear's input
``Shard(1)`` and the second's output ``Shard(1)``), one forward and one backward run with every
collective counted per pass and traced on a :class:`~distlab.timeline.Timeline` (lanes
``rank{r}/compute``: the forward and backward; ``rank{r}/tp``: the collectives). The parent
builds the same seeded module unsplit, runs it on the whole input and compares the output, the
input's gradient and every parameter's gradient with the ranks' shards put together.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from distlab import launch
from distlab._checks import check_int
from distlab.tensor_parallel.parallelize import parallelize_module
from distlab.tensor_parallel.style import (
    ColwiseParallel,
    RowwiseParallel,
    SequenceParallel,
    Shard,
)
from distlab.timeline import Span, Timeline, now_us

__all__ = ["BlockStep", "MLPBlock", "NormMLP", "TPCase", "TPRun", "run_mlp_tensor_parallel",
           "tp_mlp_rank", "tp_plan"]

SEED = 0


class MLPBlock(nn.Module):
    """A transformer's MLP: ``fc1 = Linear(hidden, ffn)``, GeLU, ``fc2 = Linear(ffn, hidden)``."""

    def __init__(self, hidden: int, ffn: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden, ffn)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(ffn, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class NormMLP(nn.Module):
    """``norm = LayerNorm(hidden)`` then ``mlp`` (:class:`MLPBlock`), on ``(batch, seq, h)``."""

    def __init__(self, hidden: int, ffn: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.mlp = MLPBlock(hidden, ffn)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.norm(x))


def _build(hidden: int, ffn: int, seed: int) -> NormMLP:
    """The seeded module (norm parameters not ones and zeros, so a wrong reduction shows)."""
    torch.manual_seed(seed)
    model = NormMLP(hidden, ffn)
    with torch.no_grad():
        model.norm.weight.uniform_(0.5, 1.5)
        model.norm.bias.uniform_(-0.5, 0.5)
    return model


def _input(micro_batch: int, seq_len: int, hidden: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed + 1)
    return torch.randn(micro_batch, seq_len, hidden, generator=g)


def tp_plan(sequence_parallel: bool) -> dict[str, Any]:
    """Megatron's plan of :class:`NormMLP` in torch's styles (the norm unsplit without
    sequence parallelism)."""
    if not sequence_parallel:
        return {"mlp.fc1": ColwiseParallel(), "mlp.fc2": RowwiseParallel()}
    return {"norm": SequenceParallel(),
            "mlp.fc1": ColwiseParallel(input_layouts=Shard(1)),
            "mlp.fc2": RowwiseParallel(output_layouts=Shard(1))}


@dataclass(frozen=True)
class BlockStep:
    """One step of the block on one rank, as drawn: a tensor or an operator between them.

    Attributes:
        kind: ``"activation"``, ``"weight"`` or ``"operator"``.
        label: what it is (``"fc1.weight"``, ``"g"``).
        shape: the local tensor's shape on this rank (``()`` for an operator).
        full_shape: the tensor's shape in one process (``()`` for an operator).
        forward, backward: an operator's collective in each pass (``"identity"`` for none).
    """

    kind: str
    label: str
    shape: tuple[int, ...] = ()
    full_shape: tuple[int, ...] = ()
    forward: str = ""
    backward: str = ""


def tp_mlp_rank(rank: int, world_size: int, hidden: int, ffn: int, seq_len: int,
                micro_batch: int, seed: int) -> dict[str, Any]:
    """Rank function of :func:`run_mlp_tensor_parallel`: per case (``"tp"``, ``"tp+sp"``) the
    local output, input gradient and parameter gradients, the collectives counted per pass,
    the traced spans and the block's steps with this rank's shapes."""
    torch.set_num_threads(1)
    out: dict[str, Any] = {}
    for sp in (False, True):
        model = _build(hidden, ffn, seed)
        full = {n: tuple(p.shape) for n, p in model.named_parameters()}
        x_full = _input(micro_batch, seq_len, hidden, seed)
        x = (x_full.chunk(world_size, 1)[rank] if sp else x_full).clone().requires_grad_(True)
        timeline = Timeline()
        if not sp:  # the norm runs unsplit on every rank: the block under test is the MLP
            inner: nn.Module = model.mlp
            x_in = model.norm(x).detach().requires_grad_(True)
        else:
            inner, x_in = model, x
        parallelize_module(model, None, tp_plan(sp), timeline=timeline)
        comm = model.tp_comm
        shapes: dict[str, tuple[int, ...]] = {}
        model.mlp.fc1.register_forward_hook(
            lambda m, a, o, shapes=shapes: shapes.update(hidden=tuple(o.shape)))
        dist.barrier()
        lane = f"rank{dist.get_rank()}/compute"
        start = now_us()
        y = inner(x_in)
        timeline.record("forward", "forward", lane, start, now_us() - start)
        forward_counts = dict(comm.counts)
        comm.reset_counts()
        start = now_us()
        (y * y).sum().backward()
        timeline.record("backward", "backward", lane, start, now_us() - start)
        backward_counts = dict(comm.counts)
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        local = {n: tuple(p.shape) for n, p in model.named_parameters()}
        act_full = (micro_batch, seq_len, hidden)
        steps = []
        if sp:
            steps += [BlockStep("activation", "x", tuple(x.shape), act_full),
                      BlockStep("weight", "norm.weight", local["norm.weight"],
                                full["norm.weight"]),
                      BlockStep("operator", "g", forward="all_gather",
                                backward="reduce_scatter"),
                      BlockStep("activation", "gathered", (*shapes["hidden"][:-1], hidden),
                                act_full)]
        else:
            steps += [BlockStep("activation", "x", tuple(x_in.shape), act_full),
                      BlockStep("operator", "f", forward="identity", backward="all_reduce")]
        steps += [BlockStep("weight", "fc1.weight", local["mlp.fc1.weight"],
                            full["mlp.fc1.weight"]),
                  BlockStep("activation", "GeLU in", shapes["hidden"],
                            (micro_batch, seq_len, ffn)),
                  BlockStep("weight", "fc2.weight", local["mlp.fc2.weight"],
                            full["mlp.fc2.weight"]),
                  BlockStep("activation", "partial", act_full, act_full)]
        if sp:
            steps += [BlockStep("operator", "g_bar", forward="reduce_scatter",
                                backward="all_gather"),
                      BlockStep("activation", "out", tuple(y.shape), act_full)]
        else:
            steps += [BlockStep("operator", "f_bar", forward="all_reduce",
                                backward="identity"),
                      BlockStep("activation", "out", tuple(y.shape), act_full)]
        out["tp+sp" if sp else "tp"] = {
            "out": y.detach(), "x_grad": x_in.grad.clone(), "grads": grads,
            "forward": forward_counts, "backward": backward_counts,
            "spans": list(timeline.spans), "steps": steps}
    return out


@dataclass(frozen=True)
class TPCase:
    """One case of :func:`run_mlp_tensor_parallel`.

    Attributes:
        sequence_parallel: whether the norm and the block's ends were sequence-sharded.
        forward, backward: per rank, the collectives counted in each pass, per kind.
        steps: per rank, the block as :class:`BlockStep` s (this rank's shapes).
        timeline: every rank's forward, backward and collectives (microseconds, host clock).
        max_out_error, max_grad_error: the largest ``|ranks - one process|`` of an output
            element, and of an element of the input's or any parameter's gradient, each
            relative to the largest ``|one process|`` element of its tensor.
    """

    sequence_parallel: bool
    forward: tuple[dict[str, int], ...]
    backward: tuple[dict[str, int], ...]
    steps: tuple[tuple[BlockStep, ...], ...]
    timeline: Timeline
    max_out_error: float
    max_grad_error: float


@dataclass(frozen=True)
class TPRun:
    """The block on ``ranks`` ranks without and with sequence parallelism
    (:func:`run_mlp_tensor_parallel`); ``cases`` keyed ``"tp"`` and ``"tp+sp"``."""

    ranks: int
    hidden: int
    ffn: int
    seq_len: int
    micro_batch: int
    cases: dict[str, TPCase]

    def summary_lines(self) -> list[str]:
        """Sizes, then per case the agreement with one process."""
        lines = [f"MLP block h={self.hidden}, ffn={self.ffn}, input (b={self.micro_batch}, "
                 f"s={self.seq_len}, h={self.hidden}) on {self.ranks} gloo ranks"]
        for name, case in self.cases.items():
            lines.append(f"{name:6s} vs one process: output within {case.max_out_error:.1e}, "
                         f"gradients within {case.max_grad_error:.1e} (relative)")
        return lines

    def count_rows(self) -> list[dict[str, Any]]:
        """One row per case, pass and collective kind: the count on every rank (equal ones
        merged as one number; otherwise the per-rank counts joined by ``|``)."""
        rows = []
        for name, case in self.cases.items():
            for phase in ("forward", "backward"):
                per_rank = getattr(case, phase)
                for kind in sorted({k for c in per_rank for k in c}):
                    counts = [c.get(kind, 0) for c in per_rank]
                    text = str(counts[0]) if len(set(counts)) == 1 else "|".join(map(str, counts))
                    rows.append({"case": name, "pass": phase, "collective": kind,
                                 "count": text})
        return rows


def _assemble(parts: list[torch.Tensor], full: torch.Tensor) -> torch.Tensor:
    """The ranks' pieces of ``full`` put together along the one dim where they are smaller
    (or rank 0's piece when each rank holds the whole)."""
    if parts[0].shape == full.shape:
        return parts[0]
    dim = next(d for d in range(full.dim()) if full.shape[d] != parts[0].shape[d])
    return torch.cat(parts, dim)


def _relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """``max |got - want|`` over ``max |want|`` (the error relative to the tensor's scale)."""
    scale = want.abs().max().item()
    return (got - want).abs().max().item() / (scale if scale > 0 else 1.0)


def run_mlp_tensor_parallel(ranks: int = 2, *, hidden: int = 64, seq_len: int = 8,
                            micro_batch: int = 2, ffn: int | None = None, seed: int = SEED,
                            timeout: float = 120.0) -> TPRun:
    """Run the block on ``ranks`` gloo ranks without and with sequence parallelism and
    compare each with one process (see the module docstring).

    Args:
        ranks: the tensor-parallel degree (processes), >= 1, dividing ``ffn`` and ``seq_len``.
        hidden, seq_len, micro_batch: ``h``, ``s``, ``b`` of the input ``(b, s, h)``.
        ffn: the MLP's inner size (default ``4 * hidden``).
        seed: the module's and the input's seed.
        timeout: seconds for the whole launch.
    """
    ranks = check_int("ranks", ranks, minimum=1)
    hidden = check_int("hidden", hidden, minimum=1)
    seq_len = check_int("seq_len", seq_len, minimum=1)
    micro_batch = check_int("micro_batch", micro_batch, minimum=1)
    ffn = 4 * hidden if ffn is None else check_int("ffn", ffn, minimum=1)
    for name, value in (("ffn", ffn), ("seq_len", seq_len)):
        if value % ranks:
            raise ValueError(f"ranks={ranks} must divide {name}={value}")
    res = launch.run(tp_mlp_rank, ranks, args=(hidden, ffn, seq_len, micro_batch, seed),
                     timeout=timeout)
    cases = {}
    for name in ("tp", "tp+sp"):
        sp = name == "tp+sp"
        model = _build(hidden, ffn, seed)
        x = _input(micro_batch, seq_len, hidden, seed).requires_grad_(True)
        if sp:
            x_in, block = x, model
        else:
            x_in = model.norm(x).detach().requires_grad_(True)
            block = model.mlp
        y = block(x_in)
        (y * y).sum().backward()
        rs = [r[name] for r in res]
        out_err = _relative_error(_assemble([r["out"] for r in rs], y), y.detach())
        grad_err = _relative_error(_assemble([r["x_grad"] for r in rs], x_in.grad), x_in.grad)
        for n, p in model.named_parameters():
            if p.grad is not None:
                grad_err = max(grad_err, _relative_error(
                    _assemble([r["grads"][n] for r in rs], p.grad), p.grad))
        timeline = Timeline([s for r in rs for s in r["spans"] if isinstance(s, Span)])
        cases[name] = TPCase(sp, tuple(r["forward"] for r in rs),
                             tuple(r["backward"] for r in rs), tuple(tuple(r["steps"]) for r in rs),
                             timeline, out_err, grad_err)
    return TPRun(ranks, hidden, ffn, seq_len, micro_batch, cases)
