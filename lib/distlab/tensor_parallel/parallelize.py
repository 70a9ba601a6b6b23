"""``parallelize_module``: split a module's submodules over a tensor-parallel group by a plan.

    from distlab.tensor_parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    model = parallelize_module(model, mesh.get_group("tp"),
                               {"net1": ColwiseParallel(), "net2": RowwiseParallel()})
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))  # torch's own
    model = parallelize_module(model, mesh["tp"], plan)

The plan maps submodule paths to styles, as torch's does: each dot-separated token is matched
against child names with ``fnmatch`` (``"layers.*.attention.wq"``). Unlike torch, a key that
matches nothing is an error, not a warning. Every key is resolved and every style checked
against its module (type, divisibility by the group size) before anything is split or any
collective runs, so bad input fails the same way on every rank and nothing hangs.
:func:`check_plan` runs the same checks with no process group, so a launcher can refuse a plan
(a hidden size the TP degree does not divide) before it starts any rank.

An attention split by heads names its head-count attribute in ``head_counts=`` (checked with
the plan, divided by the group size after the split). Parameters tied before the split (an
embedding and an output head) are split separately; tie them again afterwards, as torch's
tests do (``model.output.weight = model.tok_embeddings.weight``).

Every rank holds the full module; as torch's default (``src_data_rank=0``), the weights of
group rank 0 are broadcast to the others first, then each rank keeps its slice;
``src_data_rank=None`` keeps each rank's own weights (then seed every rank alike).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fnmatch import fnmatch

import torch
import torch.distributed as dist
from torch import nn

from distlab._checks import check_int
from distlab.tensor_parallel.comm import TPComm
from distlab.tensor_parallel.mesh import MeshLike, tp_group_of
from distlab.tensor_parallel.style import ParallelStyle
from distlab.timeline import Timeline

__all__ = ["check_plan", "parallelize_module", "resolve_head_counts", "resolve_plan"]


def resolve_plan(module: nn.Module, plan: ParallelStyle | Mapping[str, ParallelStyle],
                 ) -> list[tuple[str, nn.Module, ParallelStyle]]:
    """``(path, submodule, style)`` for every submodule the plan names, in plan order.

    Raises ``ValueError`` naming the key when a key matches no submodule, or when two keys
    name the same submodule; ``TypeError`` for a plan that is neither a style nor a mapping.
    """
    if isinstance(plan, ParallelStyle):
        return [("", module, plan)]
    if not isinstance(plan, Mapping):
        raise TypeError(f"parallelize_plan must be a ParallelStyle or a dict of submodule path "
                        f"-> ParallelStyle, got {type(plan).__name__}")
    out: list[tuple[str, nn.Module, ParallelStyle]] = []
    seen: dict[int, str] = {}
    for key, style in plan.items():
        if not isinstance(key, str):
            raise TypeError(f"parallelize_plan keys must be str paths, got {key!r}")
        if not isinstance(style, ParallelStyle):
            raise TypeError(f"parallelize_plan[{key!r}] must be a ParallelStyle "
                            f"(ColwiseParallel, RowwiseParallel, SequenceParallel), got "
                            f"{type(style).__name__}")
        found = _match(module, key.split(".") if key else [], "")
        if not found:
            children = [n for n, _ in module.named_modules() if n]
            raise ValueError(f"parallelize_plan[{key!r}] names no submodule; the module has "
                             f"{children}")
        for path, sub in found:
            if id(sub) in seen:
                raise ValueError(f"parallelize_plan[{key!r}] names submodule {path!r}, already "
                                 f"named by parallelize_plan[{seen[id(sub)]!r}]")
            seen[id(sub)] = key
            out.append((path, sub, style))
    return out


def _match(module: nn.Module, tokens: list[str], prefix: str) -> list[tuple[str, nn.Module]]:
    if not tokens:
        return [(prefix, module)]
    out = []
    for name, child in module.named_children():
        if fnmatch(name, tokens[0]):
            out += _match(child, tokens[1:], f"{prefix}.{name}" if prefix else name)
    return out


def resolve_head_counts(module: nn.Module, head_counts: Mapping[str, str | Sequence[str]],
                        tp_size: int) -> list[tuple[nn.Module, str, int]]:
    """``(submodule, attribute, heads per rank)`` for every head count ``head_counts`` names.

    ``head_counts`` maps a submodule path (matched as plan keys are) to the name of its integer
    head-count attribute, or several names (``("n_heads", "n_kv_heads")``). Raises
    ``ValueError`` naming the key when a path matches nothing, an attribute is missing or not a
    positive int, or a count is not divisible by ``tp_size``. Nothing is changed.
    """
    if not isinstance(head_counts, Mapping):
        raise TypeError(f"head_counts must be a dict of submodule path -> attribute name(s), "
                        f"got {type(head_counts).__name__}")
    out: list[tuple[nn.Module, str, int]] = []
    for key, attrs in head_counts.items():
        if not isinstance(key, str):
            raise TypeError(f"head_counts keys must be str paths, got {key!r}")
        names = (attrs,) if isinstance(attrs, str) else tuple(attrs)
        if not names or not all(isinstance(a, str) for a in names):
            raise TypeError(f"head_counts[{key!r}] must be an attribute name or a sequence of "
                            f"them, got {attrs!r}")
        found = _match(module, key.split(".") if key else [], "")
        if not found:
            raise ValueError(f"head_counts[{key!r}] names no submodule")
        for path, sub in found:
            for attr in names:
                value = getattr(sub, attr, None)
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise ValueError(f"head_counts[{key!r}]: {path or 'module'}.{attr} must be "
                                     f"a positive int head count, got {value!r}")
                if value % tp_size:
                    raise ValueError(f"head_counts[{key!r}]: {path or 'module'}.{attr} = "
                                     f"{value} heads is not divisible by the tensor-parallel "
                                     f"size {tp_size}")
                out.append((sub, attr, value // tp_size))
    return out


def check_plan(module: nn.Module, parallelize_plan: ParallelStyle | Mapping[str, ParallelStyle],
               tp_size: int, *, head_counts: Mapping[str, str | Sequence[str]] | None = None,
               ) -> list[tuple[str, nn.Module, ParallelStyle]]:
    """Every check :func:`parallelize_module` makes before it splits, for a group of ``tp_size``
    ranks, with no process group and nothing changed: call it in the launcher, before any rank
    starts. Returns :func:`resolve_plan`'s entries.

    Raises:
        TypeError: ``module`` is not an ``nn.Module``, a bad plan or head-count mapping.
        ValueError: a key that names no submodule (or one named twice), a style on a module it
            does not fit, a size (``Linear`` features, embedding rows or columns) or head count
            ``tp_size`` does not divide, naming the plan entry.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be an nn.Module, got {type(module).__name__}")
    size = check_int("tp_size", tp_size, minimum=1)
    entries = resolve_plan(module, parallelize_plan)
    for path, sub, style in entries:
        style.check(path, sub, size)
    resolve_head_counts(module, head_counts or {}, size)
    return entries


def _copy_from(src: int, modules: Sequence[nn.Module], group: dist.ProcessGroup | None) -> None:
    """Every parameter and buffer of ``modules`` broadcast from group rank ``src`` over
    ``group``, in module order (the same on every rank): the whole tensors, before any split."""
    root = src if group is None else dist.get_global_rank(group, src)
    seen: set[int] = set()
    with torch.no_grad():
        for sub in modules:
            for t in (*sub.parameters(), *sub.buffers()):
                if id(t) not in seen:
                    seen.add(id(t))
                    dist.broadcast(t.data, src=root, group=group)


def parallelize_module(module: nn.Module, device_mesh: MeshLike = None,
                       parallelize_plan: ParallelStyle | Mapping[str, ParallelStyle] | None = None,
                       *, src_data_rank: int | None = 0,
                       head_counts: Mapping[str, str | Sequence[str]] | None = None,
                       timeline: Timeline | None = None, comm: TPComm | None = None,
                       algorithm: str | None | Mapping[str, str | None] = "builtin",
                       ) -> nn.Module:
    """Split ``module`` in place over a tensor-parallel group by ``parallelize_plan``; torch's
    signature (``module, device_mesh, parallelize_plan, *, src_data_rank``), so a torch script
    runs with its import changed.

    ``device_mesh``: distlab's :class:`~distlab.tensor_parallel.mesh.DeviceMesh` or torch's
    ``DeviceMesh`` of one dimension (``init_device_mesh("cpu", (2,))``, or ``mesh["tp"]`` of a
    larger one), a process group, or None (the default group): :func:`tp_group_of`.
    ``src_data_rank``: as torch's, the group rank whose weights every rank takes (the
    parameters and buffers of every submodule the plan names are broadcast from it before the
    split, so ranks that built the module with different seeds agree, default 0); ``None``:
    each rank keeps its own slice of its own module. ``head_counts``: submodule path -> name(s)
    of its head-count attribute(s) (``{"layers.*.attention": "n_heads"}``): an attention whose
    ``wq``/``wk``/``wv`` the plan splits by columns holds ``n_heads / p`` heads per rank, so
    its reshape by ``n_heads`` needs the per-rank count; each count is checked divisible by the
    group size with the plan, then divided after the split (torch's tests set
    ``attention.n_heads`` by hand after ``parallelize_module``). ``timeline``: record every
    collective on lane ``"rank{r}/tp"``.
    ``algorithm``: what runs the collectives (:class:`TPComm`'s: ``"builtin"``, torch's own
    calls; ``None`` or a plan name, distlab's plans). ``comm``: a :class:`TPComm` to use (and
    count on) instead of a new one (its own ``algorithm`` holds then). The module gets a
    ``tp_comm`` attribute, the :class:`TPComm` whose ``counts`` tally its collectives. Raises
    ``ValueError`` (bad plan key, a style on a module it does not fit, sizes or head counts not
    divisible by the group size, a mesh of more than one dimension, ``src_data_rank`` outside
    the group) before anything is split and before any communication; ``TypeError`` naming the
    accepted types for a ``device_mesh`` of another type.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be an nn.Module, got {type(module).__name__}")
    if parallelize_plan is None:
        raise TypeError("parallelize_plan must be a ParallelStyle or a dict of submodule path "
                        "-> ParallelStyle, got None")
    group = tp_group_of(device_mesh)
    if src_data_rank is not None:
        src_data_rank = check_int("src_data_rank", src_data_rank, minimum=0)
    if comm is None:
        comm = TPComm(group, timeline=timeline, algorithm=algorithm)
    entries = check_plan(module, parallelize_plan, comm.size)
    heads = resolve_head_counts(module, head_counts or {}, comm.size)
    if src_data_rank is not None:
        if src_data_rank >= comm.size:
            raise ValueError(f"src_data_rank must be a rank of the tensor-parallel group, in "
                             f"[0, {comm.size - 1}], or None; got {src_data_rank}")
        _copy_from(src_data_rank, [sub for _, sub, _ in entries], comm.group)
    for _, sub, style in entries:
        style.apply(sub, comm)
    for sub, attr, per_rank in heads:
        setattr(sub, attr, per_rank)
    module.tp_comm = comm
    return module


