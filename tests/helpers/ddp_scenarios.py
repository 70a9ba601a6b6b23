"""Rank functions for tests/ddp/test_ddp_torch_scenarios.py: the scenarios of torch's own
uneven-input and Join tests (``distributed_test.py``: ``test_ddp_uneven_inputs`` and its models and
iteration maps, ``..._join_disable``, ``..._exception``/throw, ``test_ddp_grad_div_uneven_inputs``;
``test_join.py``'s ``AllReducer``; ``ZeroRedundancyOptimizer`` beside DDP under ``Join``), each run
on torch DDP and on distlab's DDP from the same weights and seeded random inputs, so that the
order of every sum shows. One launch runs many scenarios (start-up dominates)."""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.join import Join, Joinable, JoinHook

DIM = 6


# ---- models (module level so spawned ranks import them) ------------------------------------

class Task(nn.Module):
    """torch's ``Task``: one 2x2 parameter added to the input."""

    def __init__(self) -> None:
        super().__init__()
        self.p = torch.nn.Parameter(torch.randn(2, 2))

    def forward(self, x: Any) -> Any:
        return self.p + x


class UnusedParamModule(nn.Module):
    """torch's ``UnusedParamModule``: rank ``unused_rank`` skips ``t0``, the others use it."""

    def __init__(self, unused_rank: int) -> None:
        super().__init__()
        self.t0, self.t1, self.unused_rank = Task(), Task(), unused_rank

    def forward(self, x: Any, rank: int) -> Any:
        return self.t1(self.t0(x)) if rank != self.unused_rank else self.t1(x)


class AlternatingUnused(nn.Module):
    """A second layer used only on even calls (torch's ``unused_param_iter`` idea), plus a
    batch norm, so globally unused parameters and buffers both appear. ``first_call``: the
    number of the first call (1: ``b`` unused first; 2: used first)."""

    def __init__(self, first_call: int = 1) -> None:
        super().__init__()
        self.a = torch.nn.Linear(DIM, DIM)
        self.b = torch.nn.Linear(DIM, DIM)
        self.bn = torch.nn.BatchNorm1d(DIM)
        self.calls = first_call - 1

    def forward(self, x: Any) -> Any:
        self.calls += 1
        h = self.bn(self.a(x))
        return self.b(h) if self.calls % 2 == 0 else h


class TwoBranches(nn.Module):
    """Two branches with parameters of their own, and (``shared``) a trunk before both: a
    model with two losses backpropagated one after the other."""

    def __init__(self, shared: bool) -> None:
        super().__init__()
        self.trunk = torch.nn.Linear(DIM, DIM) if shared else None
        self.left = torch.nn.Linear(DIM, 3)
        self.right = torch.nn.Linear(DIM, 2)

    def forward(self, x: Any) -> Any:
        if self.trunk is not None:
            x = self.trunk(x).relu()
        return self.left(x), self.right(x)


class ReusedUnderCheckpoint(nn.Module):
    """A layer applied twice, each time under a reentrant ``checkpoint``: its parameters'
    gradient hooks fire twice in one backward (torch's "marked ready twice" case, which
    ``static_graph`` supports)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(DIM, DIM)
        self.shared = torch.nn.Linear(DIM, DIM)

    def forward(self, x: Any) -> Any:
        from torch.utils.checkpoint import checkpoint
        h = self.a(x)
        h = checkpoint(self.shared, h, use_reentrant=True)
        return checkpoint(self.shared, h.tanh(), use_reentrant=True)


def make_model(name: str, world: int) -> Any:
    torch.manual_seed(1234)
    if name == "small":
        return nn.Sequential(nn.Linear(DIM, 8, bias=False), nn.ReLU(), nn.Linear(8, DIM))
    if name == "batch_norm":
        return nn.Sequential(nn.Linear(DIM, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
    if name == "conv":
        return nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                             nn.Flatten(), nn.Linear(4 * 5 * 5, 3))
    if name == "unjoined_unused":  # the rank that trains longest skips t0
        return UnusedParamModule(world - 1)
    if name == "joined_unused":  # the rank that joins first skips t0
        return UnusedParamModule(0)
    if name == "alternating":
        return AlternatingUnused()
    if name == "alternating_used_first":
        return AlternatingUnused(first_call=2)
    if name == "discriminator":  # a GAN discriminator's first layers
        return nn.Sequential(nn.Linear(DIM, 4), nn.BatchNorm1d(4))
    if name == "checkpointed":
        return ReusedUnderCheckpoint()
    if name in ("two_branches", "two_branches_trunk"):
        return TwoBranches(shared=name.endswith("trunk"))
    raise ValueError(name)


def _batches(name: str, rank: int, count: int) -> list[Any]:
    g = torch.Generator().manual_seed(77 + 13 * rank)
    shape = {"conv": (3, 2, 5, 5), "unjoined_unused": (2, 2),
             "joined_unused": (2, 2)}.get(name, (4, DIM))
    return [torch.randn(*shape, generator=g) for _ in range(count)]


def _call(model: Any, name: str, x: Any, rank: int) -> Any:
    return model(x, rank) if name.endswith("_unused") else model(x)


def _backward(model: Any, name: str, x: Any, rank: int, steps: str) -> None:
    """One iteration's forwards and backwards: ``"plain"``, one of each; ``"two_forwards"``, a
    GAN discriminator's step (the batch's halves forwarded one after the other, as real then
    fake data, and one backward of the summed losses); ``"two_backwards"``, one forward and its
    loss backpropagated twice (``retain_graph=True``, then plain); ``"per_output"``, a loss per
output of the forward, each backpropagated on its own."""
    if steps == "two_forwards":
        half = x.shape[0] // 2
        loss = (_call(model, name, x[:half], rank).pow(2).mean()
                + _call(model, name, x[half:], rank).pow(2).mean())
        loss.backward()
    elif steps == "two_backwards":
        loss = _call(model, name, x, rank).pow(2).mean()
        loss.backward(retain_graph=True)
        loss.backward()
    elif steps == "per_output":
        outs = _call(model, name, x, rank)
        for k, out in enumerate(outs):
            out.pow(2).mean().backward(retain_graph=k + 1 < len(outs))
    else:
        _call(model, name, x, rank).pow(2).mean().backward()


# ---- one scenario on one implementation ----------------------------------------------------

def _wrap(kind: str, model: Any, cfg: dict[str, Any]) -> Any:
    kw = {"find_unused_parameters": cfg.get("unused", False),
          "broadcast_buffers": cfg.get("buffers", True), "bucket_cap_mb": cfg.get("cap", 1),
          "gradient_as_bucket_view": cfg.get("view", False)}
    if cfg.get("static"):
        kw["static_graph"] = True
    if kind == "torch":
        from torch.nn.parallel import DistributedDataParallel
        ddp = DistributedDataParallel(model, **kw)
        if kw["find_unused_parameters"]:
            # torch allocates the used-parameter map a joined rank sends with at::empty; a rank
            # that joins before its first backward sends it as it was, so torch's result there
            # depends on leftover memory (seen in CI: a -1 that cancelled a peer's 1 and left a
            # used parameter's gradient unaveraged). Zeros are what distlab sends.
            ddp.reducer._get_local_used_map().fill_(cfg.get("torch_used_map_fill", 0))
        return ddp
    from distlab.ddp import DDP
    return DDP(model, timeout=cfg.get("timeout", 30.0), **kw)


def _hook(kind: str, name: str | None) -> Any:
    if name is None:
        return None
    from helpers.ddp_targets import _hooks
    return _hooks(name)[0 if kind == "torch" else 1]


def _optimizer(cfg: dict[str, Any], params: Any) -> Any:
    if cfg.get("opt") == "adam":
        return torch.optim.Adam(params, lr=1e-2)
    if cfg.get("opt") == "momentum":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=0.01)
    return torch.optim.SGD(params, lr=0.1)


class _AllReducerHook(JoinHook):
    def __init__(self, owner: AllReducer) -> None:
        self.owner = owner

    def main_hook(self) -> None:
        dist.all_reduce(torch.zeros(1), group=self.owner.join_process_group)

    def post_hook(self, is_last_joiner: bool) -> None:
        self.owner.post = is_last_joiner


class AllReducer(Joinable):
    """torch's ``test_join.py`` ``AllReducer``: a user ``Joinable`` that allreduces ones per
    iteration on the default group (joined ranks shadow it with zeros)."""

    def __init__(self) -> None:
        super().__init__()
        self.total = 0.0
        self.post: bool | None = None

    def __call__(self) -> None:
        Join.notify_join_context(self)
        t = torch.ones(1)
        dist.all_reduce(t, group=self.join_process_group)
        self.total += float(t.item())

    def join_hook(self, **kwargs: Any) -> JoinHook:
        return _AllReducerHook(self)

    @property
    def join_device(self) -> torch.device:
        return torch.device("cpu")

    @property
    def join_process_group(self) -> Any:
        return dist.group.WORLD


def _train(kind: str, rank: int, world: int, cfg: dict[str, Any]) -> dict[str, Any]:
    """Train one implementation on this rank's ``cfg["counts"][rank]`` batches; the final
    parameters, buffers and ``.grad is None`` pattern, or the error it raised."""
    name = cfg["model"]
    model = _wrap(kind, make_model(name, world), cfg)
    hook = _hook(kind, cfg.get("hook"))
    if hook is not None:
        model.register_comm_hook(None, hook)
    extra = cfg.get("with", ())
    joinables: list[Any] = []
    if "zero" in extra:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt: Any = ZeroRedundancyOptimizer(model.parameters(), torch.optim.Adam, lr=1e-2)
        joinables.append(opt)
    else:
        opt = _optimizer(cfg, model.parameters())
    reducer = AllReducer() if "allreducer" in extra else None
    if reducer is not None:
        joinables.append(reducer)
    # the joinables' order is the order of their collectives in an iteration (Join runs the
    # joined ranks' hooks in it): DDP last means the user's allreduce comes before the forward
    ddp_last = cfg.get("ddp_last", False)
    joinables = (joinables + [model]) if ddp_last else ([model] + joinables)
    mode = cfg.get("join", "join")
    out: dict[str, Any] = {"error": None}
    try:
        if mode == "none":
            ctx: Any = contextlib.nullcontext()
        elif mode == "method":
            ctx = model.join(divide_by_initial_world_size=cfg.get("divide_initial", True),
                             enable=cfg.get("enable", True),
                             throw_on_early_termination=cfg.get("throw", False))
        else:
            ctx = Join(joinables, enable=cfg.get("enable", True),
                       throw_on_early_termination=cfg.get("throw", False),
                       divide_by_initial_world_size=cfg.get("divide_initial", True))
        with ctx:
            for i, x in enumerate(_batches(name, rank, cfg["counts"][rank])):
                steps = cfg.get("steps", "plain")
                if cfg.get("no_sync_every") and i % cfg["no_sync_every"] == 1:
                    with model.no_sync():
                        _backward(model, name, x, rank, steps)
                    continue
                if reducer is not None and ddp_last:
                    reducer()
                _backward(model, name, x, rank, steps)
                if reducer is not None and not ddp_last:
                    reducer()
                opt.step()
                opt.zero_grad()
    except RuntimeError as exc:
        out["error"] = str(exc).splitlines()[0][:600]
    m = model.module
    out["params"] = [p.detach().clone() for p in m.parameters()]
    out["buffers"] = [b.detach().clone() for b in m.buffers()]
    out["grad_none"] = [p.grad is None for p in m.parameters()]
    if reducer is not None:
        out["allreducer"] = (reducer.total, reducer.post)
    return out


def _same(a: list[Any], b: list[Any]) -> tuple[bool, float]:
    if len(a) != len(b):
        return False, float("inf")
    if not a:
        return True, 0.0
    eq = all(x.dtype == y.dtype and torch.equal(x, y) for x, y in zip(a, b, strict=True))
    diff = max(float((x.double() - y.double()).abs().max()) for x, y in zip(a, b, strict=True))
    return eq, diff


def compare_scenarios(rank: int, world_size: int,
                      cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each case on torch DDP then on distlab's DDP (fresh models, same seeds): whether the
    parameters and buffers are bitwise equal, and both errors (``None`` when it trained)."""
    import os
    import sys
    import warnings
    warnings.filterwarnings("ignore", message=".*broadcast_buffers.*is deprecated")
    warnings.filterwarnings("ignore", message=".*Work::result")
    rows = []
    for k, cfg in enumerate(cases):
        if os.environ.get("DDP_SCENARIO_TRACE"):
            print(f"rank {rank} case {k} {cfg}", file=sys.stderr, flush=True)
        ref = _train("torch", rank, world_size, cfg)
        dist.barrier()
        ours = _train("distlab", rank, world_size, cfg)
        dist.barrier()
        p_eq, p_diff = _same(ref["params"], ours["params"])
        b_eq, b_diff = _same(ref["buffers"], ours["buffers"])
        rows.append({"params_equal": p_eq, "params_diff": p_diff, "buffers_equal": b_eq,
                     "buffers_diff": b_diff, "torch_error": ref["error"],
                     "ours_error": ours["error"],
                     "grad_none_equal": ref["grad_none"] == ours["grad_none"],
                     "allreducer": (ref.get("allreducer"), ours.get("allreducer"))})
    return rows


def distlab_only(rank: int, world_size: int, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Cases torch cannot run to an end here (it hangs or aborts): distlab's DDP alone; the
    error each rank raised (type and first line) and after how many seconds."""
    import time

    rows = []
    for cfg in cases:
        t0 = time.monotonic()
        try:
            out = _train_raising(rank, world_size, cfg)
        except Exception as exc:  # the point: what each rank raises
            out = {"type": type(exc).__name__, "error": str(exc)}
        out["seconds"] = time.monotonic() - t0
        rows.append(out)
    return rows


def _train_raising(rank: int, world: int, cfg: dict[str, Any]) -> dict[str, Any]:
    """Like :func:`_train` without Join and without catching; models per rank may differ."""
    name = cfg["model"]
    if isinstance(cfg.get("cap"), list):
        cfg = {**cfg, "cap": cfg["cap"][rank]}
    if cfg.get("models_per_rank"):
        torch.manual_seed(rank)
        model = _wrap("distlab", torch.nn.Linear(DIM, DIM + rank), cfg)
        name = "small"
    else:
        model = _wrap("distlab", make_model(name, world), cfg)
    opt = _optimizer(cfg, model.parameters())
    for x in _batches(name, rank, cfg["counts"][rank]):
        _call(model, name, x, rank).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    return {"type": None, "error": None}
