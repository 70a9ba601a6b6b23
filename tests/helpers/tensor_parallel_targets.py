"""Rank functions used only by tests/tensor_parallel (importable by spawned ranks).

Each case builds one seeded model three times on every rank: unsplit (the one-process
reference), split by distlab's ``parallelize_module`` and split by torch's
``torch.distributed.tensor.parallel.parallelize_module`` with the same plan, then runs one
forward, backward and SGD step on each and returns what to compare, as plain tensors.

The MLP is torch's test ``MLPModule`` (``torch.testing._internal.distributed._tensor.
common_dtensor``: seed 5, Linear(10, 16), ReLU, Linear(16, 10)) built here, so the tests need
no ``expecttest`` (which torch's test utilities import).

Two runs compare by :func:`helpers.float_tolerance.error_ratio` (at most 1 passes): the split
models sum the same terms as the unsplit one in another order (a partial matmul per rank, then an
all-reduce), so they agree to the rounding of :data:`REDUCTION`-term sums :data:`DEPTH` deep.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import distlab.tensor_parallel as tp
from distlab.timeline import Timeline
from helpers.float_tolerance import error_ratio

LR = 0.1
SEQ = 8
REDUCTION = 16
"""The longest sum behind a compared value, over every case: the MLP's hidden width (16), the
embedding case's vocabulary (16, the cross-entropy's log-sum-exp and the head's input gradient),
the tokens a weight gradient adds (at most 2 * SEQ = 16) and the ranks an all-reduce adds."""
DEPTH = 6
"""Reductions in series, the deepest case (LayerNorm, net1, net2 forward; the same backward)."""


class MLPModule(nn.Module):
    """torch's test MLPModule: Linear(10, 16), ReLU, Linear(16, 10), seed 5."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(5)
        self.net1 = nn.Linear(10, 16)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net2(self.relu(self.net1(x)))


class NormMLP(nn.Module):
    """LayerNorm(10) then MLPModule, on ``(batch, seq, 10)``: torch's sequence-parallel test
    shape (norm sequence-parallel, then the column and row split)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(6)
        self.norm = nn.LayerNorm(10)
        with torch.no_grad():  # not ones/zeros, so a wrong reduction shows
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)
        self.mlp = MLPModule()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.norm(x))


class EmbedHead(nn.Module):
    """Embedding(16, 8) -> ReLU -> Linear(8, 16): a vocabulary split in, a vocabulary split
    out (loss parallel)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(7)
        self.tok = nn.Embedding(16, 8)
        self.relu = nn.ReLU()
        self.output = nn.Linear(8, 16, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.output(self.relu(self.tok(ids)))


def _plans(case: str, lib: Any) -> dict[str, Any]:
    """The plan of ``case`` in the styles of ``lib`` (distlab's or torch's module)."""
    shard1 = lib.Shard(1)
    return {
        "mlp": {"net1": lib.ColwiseParallel(), "net2": lib.RowwiseParallel()},
        "sp": {"norm": lib.SequenceParallel(),
               "mlp.net1": lib.ColwiseParallel(input_layouts=shard1),
               "mlp.net2": lib.RowwiseParallel(output_layouts=shard1)},
        "embed": {"tok": lib.RowwiseParallel(input_layouts=lib.Replicate()),
                  "output": lib.ColwiseParallel(output_layouts=lib.Replicate())},
        "embed_loss_parallel": {"tok": lib.RowwiseParallel(input_layouts=lib.Replicate()),
                                "output": lib.ColwiseParallel()},
    }[case]


def _model_and_input(case: str) -> tuple[nn.Module, torch.Tensor, torch.Tensor | None]:
    g = torch.Generator().manual_seed(11)
    if case.startswith("mlp"):
        return MLPModule(), torch.randn(4, 10, generator=g), None
    if case == "sp":
        return NormMLP(), torch.randn(2, SEQ, 10, generator=g), None
    ids = torch.randint(0, 16, (3, 5), generator=g)
    return EmbedHead(), ids, torch.randint(0, 16, (3, 5), generator=g)


def _chunk_like(full: torch.Tensor, local: torch.Tensor, rank: int, size: int) -> torch.Tensor:
    """This rank's chunk of ``full`` along the one dim where ``local`` is smaller."""
    if full.shape == local.shape:
        return full
    dim = next(d for d in range(full.dim()) if full.shape[d] != local.shape[d])
    return full.chunk(size, dim)[rank]


def _loss(case: str, out: torch.Tensor, target: torch.Tensor | None) -> torch.Tensor:
    if target is not None:
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))
    return (out * out).sum()


def _comm_name(op: Any) -> str:
    text = str(op)
    for name in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"):
        if name in text:
            return name
    return text


def _full(t: Any) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return t.full_tensor() if isinstance(t, DTensor) else t


def _local(t: Any) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


def compare_case(case: str, rank: int, world: int) -> dict[str, Any]:
    """Run ``case`` three ways; return each comparison's :func:`error_ratio` (``checks``) and
    the collective counts."""
    import torch.distributed.tensor.parallel as tt
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.debug import CommDebugMode

    class TorchLib:  # torch's styles, spelt as the plan builder reads them
        ColwiseParallel, RowwiseParallel = tt.ColwiseParallel, tt.RowwiseParallel
        SequenceParallel = tt.SequenceParallel

    TorchLib.Shard, TorchLib.Replicate = Shard, Replicate  # type: ignore[attr-defined]

    full, x, target = _model_and_input(case)
    ref, ours, theirs = full, copy.deepcopy(full), copy.deepcopy(full)
    loss_parallel = case == "embed_loss_parallel"

    # one process, unsplit
    ref_out = ref(x)
    _loss(case, ref_out, target).backward()
    ref_grads = {n: p.grad.clone() for n, p in ref.named_parameters()}
    torch.optim.SGD(ref.parameters(), lr=LR).step()
    x_ours = x.chunk(world, 1)[rank] if case == "sp" else x

    # distlab
    tp.parallelize_module(ours, None, _plans(case, tp))
    out = ours(x_ours)
    if loss_parallel:
        loss = tp.loss_parallel_cross_entropy(out, target, ours.tp_comm)
    else:
        loss = _loss(case, out, target)
    loss.backward()
    counts = dict(ours.tp_comm.counts)
    grads = {n: p.grad.clone() for n, p in ours.named_parameters()}
    torch.optim.SGD(ours.parameters(), lr=LR).step()

    # torch
    mesh = init_device_mesh("cpu", (world,))
    tt.parallelize_module(theirs, mesh, _plans(case, TorchLib))
    with CommDebugMode() as mode:
        t_out = theirs(x_ours)
        if loss_parallel:
            with tt.loss_parallel():
                from torch.distributed.tensor import DTensor

                d_out = DTensor.from_local(t_out, mesh, [Shard(-1)], run_check=False)
                t_loss = F.cross_entropy(d_out.reshape(-1, d_out.shape[-1]), target.reshape(-1))
                t_loss.backward()
        else:
            t_loss = _loss(case, t_out, target)
            t_loss.backward()
    torch_counts: dict[str, int] = {}
    for op, n in mode.get_comm_counts().items():
        torch_counts[_comm_name(op)] = torch_counts.get(_comm_name(op), 0) + n
    with CommDebugMode() as step_mode:  # torch reduces partial gradients in the step
        torch.optim.SGD(theirs.parameters(), lr=LR).step()
    step_counts: dict[str, int] = {}
    for op, n in step_mode.get_comm_counts().items():
        step_counts[_comm_name(op)] = step_counts.get(_comm_name(op), 0) + n
    t_grads = {n: _full(p.grad) for n, p in theirs.named_parameters()}

    def err(a: torch.Tensor, b: torch.Tensor) -> float:
        return error_ratio(a, b, reduction_length=REDUCTION, depth=DEPTH)

    def chunk(full_t: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
        return _chunk_like(full_t, local, rank, world)

    ref_out_local = ref_out.chunk(world, 1)[rank] if case == "sp" else ref_out
    if loss_parallel:
        ref_out_local = ref_out.chunk(world, -1)[rank]
    checks = {
        "out_vs_ref": err(out, ref_out_local),
        "out_vs_torch": err(out, _local(t_out)),
    }
    if loss_parallel:
        ref_loss = F.cross_entropy(ref_out.reshape(-1, 16), target.reshape(-1))
        checks["loss_vs_torch"] = err(_full(loss).detach(), _full(t_loss).detach())
        checks["loss_vs_ref"] = err(loss.detach(), ref_loss.detach())
    ours_params = dict(ours.named_parameters())
    theirs_params = dict(theirs.named_parameters())
    for n, p in ref.named_parameters():
        mine = ours_params[n]
        checks[f"grad {n} vs ref"] = err(grads[n], chunk(ref_grads[n], grads[n]))
        checks[f"grad {n} vs torch"] = err(grads[n], chunk(t_grads[n], grads[n]))
        checks[f"step {n} vs ref"] = err(mine.detach(), chunk(p.detach(), mine))
        checks[f"step {n} vs torch"] = err(mine.detach(),
                                           chunk(_full(theirs_params[n]).detach(), mine))
    return {"checks": checks, "ours": counts, "torch": torch_counts, "torch_step": step_counts}


def compare_cases(rank: int, world: int, cases: list[str]) -> dict[str, Any]:
    """:func:`compare_case` for every case, in one launch."""
    return {case: compare_case(case, rank, world) for case in cases}


def mesh_and_timeline(rank: int, world: int) -> dict[str, Any]:
    """A (2, world/2) mesh's groups summed over, and a traced TP forward."""
    mesh = tp.init_mesh((2, world // 2), ("dp", "tp"))
    sums = {}
    for dim in ("dp", "tp"):
        t = torch.tensor([float(rank)])
        dist.all_reduce(t, group=mesh.get_group(dim))
        sums[dim] = (t.item(), mesh.group_ranks(dim), mesh.get_local_rank(dim), mesh.size(dim))
    timeline = Timeline()
    model = tp.parallelize_module(MLPModule(), mesh.get_group("tp"),
                                  {"net1": tp.ColwiseParallel(), "net2": tp.RowwiseParallel()},
                                  timeline=timeline)
    x = torch.randn(4, 10, requires_grad=True)
    model(x).sum().backward()
    spans = [(s.name, s.lane, s.args.get("nbytes")) for s in timeline.spans]
    return {"sums": sums, "coordinate": mesh.coordinate, "mesh": mesh.mesh, "spans": spans,
            "counts": dict(model.tp_comm.counts)}


def bad_plans(rank: int, world: int) -> dict[str, str]:
    """Every bad plan's ``ValueError`` message on this rank, then one all-reduce to show the
    ranks are still in step (the errors came before any collective)."""
    wide = 3 * world + 1
    plans = {
        "missing": (MLPModule, {"net3": tp.ColwiseParallel()}),
        "wrong_type": (MLPModule, {"relu": tp.ColwiseParallel()}),
        "sp_on_linear": (MLPModule, {"net1": tp.SequenceParallel()}),
        "col_not_divisible": (lambda: nn.Sequential(nn.Linear(10, wide)),
                              {"0": tp.ColwiseParallel()}),
        "row_not_divisible": (lambda: nn.Sequential(nn.Linear(wide, 10)),
                              {"0": tp.RowwiseParallel()}),
        "late_bad_entry": (MLPModule, {"net1": tp.ColwiseParallel(), "net9": tp.RowwiseParallel()}),
    }
    out = {}
    for name, (build, plan) in plans.items():
        model = build()
        before = {n: p.shape for n, p in model.named_parameters()}
        try:
            tp.parallelize_module(model, None, plan)
        except ValueError as e:
            unchanged = before == {n: p.shape for n, p in model.named_parameters()}
            out[name] = f"{e} | unchanged={unchanged}"
        else:
            out[name] = "no error"
    t = torch.ones(1)
    dist.all_reduce(t)
    out["in_step"] = str(t.item())
    return out


def plans_vs_builtin(rank: int, world: int, cases: list[str]) -> dict[str, Any]:
    """Each case split twice more, its collectives run by distlab's plans (``"ring"`` for all
    three, and each collective's default plan, ``algorithm=None``), beside the same split on
    torch's builtins: the largest difference of the outputs and gradients (``max_abs``), its
    :func:`error_ratio` for sums of ``world`` terms (``ratio``), and whether the collectives
    counted are the same."""
    out: dict[str, Any] = {}
    for case in cases:
        full, x, target = _model_and_input(case)
        x = x.chunk(world, 1)[rank] if case == "sp" else x
        runs = {}
        for algorithm in ("builtin", "ring", None):
            model = copy.deepcopy(full)
            tp.parallelize_module(model, None, _plans(case, tp), algorithm=algorithm)
            y = model(x)
            if case == "embed_loss_parallel":
                loss = tp.loss_parallel_cross_entropy(y, target, model.tp_comm)
            else:
                loss = _loss(case, y, target)
            loss.backward()
            runs[algorithm] = (y.detach(), {n: p.grad.clone() for n, p in model.named_parameters()},
                               dict(model.tp_comm.counts))
        base = runs["builtin"]
        # the plans add the same ``world`` partial sums as gloo in another order
        out[case] = {
            str(a): {"max_abs": max([float((r[0] - base[0]).abs().max())] +
                                    [float((r[1][n] - base[1][n]).abs().max()) for n in base[1]]),
                     "ratio": max([error_ratio(r[0], base[0], reduction_length=world,
                                               depth=DEPTH)] +
                                  [error_ratio(r[1][n], base[1][n], reduction_length=world,
                                               depth=DEPTH) for n in base[1]]),
                     "counts_equal": r[2] == base[2]}
            for a, r in runs.items() if a != "builtin"}
    return out
