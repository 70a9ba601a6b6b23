"""A small device mesh: the default group's ranks laid out on named dimensions.

    mesh = init_mesh((2, 2), ("dp", "tp"))      # 4 ranks: rank = dp_index * 2 + tp_index
    tp_group = mesh.get_group("tp")            # this rank's tensor-parallel process group
    mesh.get_local_rank("tp"), mesh.size("tp")

Ranks are laid out in row-major order, as torch's ``init_device_mesh`` lays them out: the last
dimension varies fastest, so the ranks of one ``tp`` group are neighbours. Every group of every
dimension is made with ``dist.new_group`` on every rank in the same order (torch requires it),
and the mesh keeps the one that holds this rank. It is one mesh for tensor, data and pipeline
parallel compositions; it has no devices of its own (the ranks' tensors sit where they sit).

Any order of names works; the dimension named last is the innermost (neighbouring ranks). For
tensor x pipeline parallelism put ``"tp"`` last, ``("pp", "tp")`` or ``("pp", "dp", "tp")``::

    mesh = init_mesh((2, 2), ("pp", "tp"))     # stage s, TP rank t: rank s * 2 + t
    # mesh.get_group("tp"): this stage's TP ranks; mesh.get_group("pp"): the ranks of this TP
    # coordinate on every stage, the group to give PipelineStage(..., group=...)

:func:`check_mesh_shape` and :func:`mesh_groups` are pure (no process group): check a shape
against a world size before any rank starts, and list every group of a dimension.

torch's own ``torch.distributed.device_mesh.DeviceMesh`` is accepted wherever this one is
(:func:`tp_group_of`): a one-dimensional mesh (``init_device_mesh("cpu", (2,))``) or a named
dimension of a larger one (``mesh["tp"]``), so a torch script keeps its mesh.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh as TorchDeviceMesh

from distlab._checks import check_int

__all__ = ["DeviceMesh", "MeshLike", "TorchDeviceMesh", "check_mesh_shape", "init_mesh",
           "mesh_groups", "tp_group_of"]


class DeviceMesh:
    """This rank's view of a mesh of ranks; build it with :func:`init_mesh`.

    ``shape`` is the number of ranks along each dimension, ``dim_names`` their names,
    ``coordinate`` this rank's index along each dimension. ``mesh`` is the nested list of global
    ranks (``mesh[i][j]`` for a 2-D mesh).
    """

    def __init__(self, shape: tuple[int, ...], dim_names: tuple[str, ...], rank: int,
                 groups: tuple[dist.ProcessGroup, ...],
                 group_ranks: tuple[tuple[int, ...], ...]) -> None:
        self.shape = shape
        self.dim_names = dim_names
        self.rank = rank
        self._groups = groups
        self._group_ranks = group_ranks
        self.coordinate = tuple(_coordinate(rank, shape))

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def mesh(self) -> list:
        """The global ranks as nested lists of the mesh's shape."""
        ranks = list(range(math.prod(self.shape)))
        for size in reversed(self.shape[1:]):
            ranks = [ranks[i:i + size] for i in range(0, len(ranks), size)]
        return ranks

    def _dim(self, dim: int | str) -> int:
        if isinstance(dim, str):
            if dim not in self.dim_names:
                raise ValueError(f"dim must be one of the mesh's dimension names "
                                 f"{list(self.dim_names)} or an index, got {dim!r}")
            return self.dim_names.index(dim)
        return check_int("dim", dim, minimum=0, maximum=self.ndim - 1)

    def get_group(self, dim: int | str = 0) -> dist.ProcessGroup:
        """This rank's process group along ``dim`` (a name or an index)."""
        return self._groups[self._dim(dim)]

    def group_ranks(self, dim: int | str = 0) -> tuple[int, ...]:
        """The global ranks of this rank's group along ``dim``, in group-rank order."""
        return self._group_ranks[self._dim(dim)]

    def get_local_rank(self, dim: int | str = 0) -> int:
        """This rank's index along ``dim`` (its rank inside :meth:`get_group`)."""
        return self.coordinate[self._dim(dim)]

    def size(self, dim: int | str | None = None) -> int:
        """Ranks along ``dim``; all ranks of the mesh when ``dim`` is None."""
        if dim is None:
            return math.prod(self.shape)
        return self.shape[self._dim(dim)]

    def __repr__(self) -> str:
        dims = ", ".join(f"{n}={s}" for n, s in zip(self.dim_names, self.shape, strict=True))
        return f"DeviceMesh({dims}; rank {self.rank} at {self.coordinate})"


def _coordinate(rank: int, shape: Sequence[int]) -> list[int]:
    out = []
    for size in reversed(shape):
        out.append(rank % size)
        rank //= size
    return out[::-1]


def _flat(coordinate: Sequence[int], shape: Sequence[int]) -> int:
    rank = 0
    for index, size in zip(coordinate, shape, strict=True):
        rank = rank * size + index
    return rank


def check_mesh_shape(shape: int | Sequence[int], dim_names: Sequence[str] | None = None,
                     world_size: int | None = None) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """``(shape, dim_names)`` checked and normalised, with no process group: call it before
    starting ranks. ``shape``: ranks per dimension (an int for one dimension). ``dim_names``: one
    distinct name per dimension (default ``"dim0"``, ``"dim1"``, ...). ``world_size``: when
    given, the product of ``shape`` must equal it.

    Raises:
        TypeError: a size that is not an int, names that are not str.
        ValueError: an empty shape, a size below 1, names not one per dimension or not
            distinct, or a shape that does not hold ``world_size`` ranks (the message names the
            product and the world size, e.g. ``pp * tp = 2 * 3 = 6 ranks``).
    """
    if isinstance(shape, int) or not isinstance(shape, Sequence):
        shape = (shape,)
    dims = tuple(check_int(f"shape[{i}]", s, minimum=1) for i, s in enumerate(shape))
    if not dims:
        raise ValueError("shape must name at least one dimension, got ()")
    if dim_names is None:
        names = tuple(f"dim{i}" for i in range(len(dims)))
    else:
        if isinstance(dim_names, str) or not all(isinstance(n, str) for n in dim_names):
            raise TypeError(f"dim_names must be a sequence of str, got {dim_names!r}")
        names = tuple(dim_names)
        if len(names) != len(dims) or len(set(names)) != len(names):
            raise ValueError(f"dim_names must be {len(dims)} distinct names (one per dimension "
                             f"of shape {dims}), got {list(names)}")
    if world_size is not None:
        world = check_int("world_size", world_size, minimum=1)
        if math.prod(dims) != world:
            product = " * ".join(names)
            sizes = " * ".join(str(d) for d in dims)
            raise ValueError(f"shape {dims} holds {product} = {sizes} = {math.prod(dims)} "
                             f"ranks; it must hold the world size {world}")
    return dims, names


def mesh_groups(shape: int | Sequence[int], dim: int,
                dim_names: Sequence[str] | None = None) -> list[tuple[int, ...]]:
    """Every group of ranks along dimension ``dim`` (an index, or a name of ``dim_names``) of a
    row-major mesh of ``shape``, in the order :func:`init_mesh` creates them; each group's
    ranks in group-rank order. Pure: ``mesh_groups((2, 2), 0)`` is ``[(0, 2), (1, 3)]`` (the
    ``"pp"`` groups of a ``("pp", "tp")`` mesh), ``mesh_groups((2, 2), 1)`` is
    ``[(0, 1), (2, 3)]``.

    Raises:
        ValueError: a bad shape (see :func:`check_mesh_shape`) or ``dim`` outside it.
    """
    dims, names = check_mesh_shape(shape, dim_names)
    if isinstance(dim, str):
        if dim not in names:
            raise ValueError(f"dim must be one of the mesh's dimension names {list(names)} or "
                             f"an index, got {dim!r}")
        d = names.index(dim)
    else:
        d = check_int("dim", dim, minimum=0, maximum=len(dims) - 1)
    others = [range(s) for i, s in enumerate(dims) if i != d]
    out = []
    for fixed in itertools.product(*others):
        ranks = []
        for k in range(dims[d]):
            coord = list(fixed)
            coord.insert(d, k)
            ranks.append(_flat(coord, dims))
        out.append(tuple(ranks))
    return out


def init_mesh(shape: int | Sequence[int], dim_names: Sequence[str] | None = None) -> DeviceMesh:
    """Lay the default group's ranks out on a mesh of ``shape`` with ``dim_names``.

    ``shape``: ranks per dimension (an int for one dimension); their product must be the world
    size. ``dim_names``: one distinct name per dimension (default ``"dim0"``, ``"dim1"``, ...).
    Call it on every rank (it makes ``dist.new_group`` calls, a collective act). Raises
    ``ValueError`` naming the argument for a shape that does not cover the world or bad names
    (:func:`check_mesh_shape`, which checks the same before any rank starts),
    ``RuntimeError`` when no process group is initialized.
    """
    dims, names = check_mesh_shape(shape, dim_names)
    if not dist.is_initialized():
        raise RuntimeError("init_mesh needs an initialized default process group "
                           "(dist.init_process_group, or distlab.launch.run)")
    world = dist.get_world_size()
    check_mesh_shape(dims, names, world)
    rank = dist.get_rank()
    groups: list[dist.ProcessGroup] = []
    members: list[tuple[int, ...]] = []
    for d in range(len(dims)):
        mine = None
        for ranks in mesh_groups(dims, d):
            group = dist.new_group(list(ranks))  # every rank, every group, same order
            if rank in ranks:
                mine = (group, ranks)
        assert mine is not None
        groups.append(mine[0])
        members.append(mine[1])
    return DeviceMesh(dims, names, rank, tuple(groups), tuple(members))


MeshLike = DeviceMesh | TorchDeviceMesh | dist.ProcessGroup | None
"""What the tensor-parallel API takes as its group: distlab's mesh, torch's, a process group or
None (the default group)."""

ACCEPTED = ("a one-dimensional distlab.tensor_parallel.DeviceMesh or "
            "torch.distributed.device_mesh.DeviceMesh (of a larger mesh, its named dimension: "
            "mesh['tp']), a torch.distributed.ProcessGroup, or None (the default group)")
"""The types :func:`tp_group_of` accepts, qualified, as its errors name them."""


def _qualified(value: object) -> str:
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"


def tp_group_of(device_mesh: MeshLike, name: str = "device_mesh") -> dist.ProcessGroup | None:
    """The process group a tensor-parallel call runs over, from what the caller gave as ``name``.

    Accepted: distlab's :class:`DeviceMesh` of one dimension; torch's
    ``torch.distributed.device_mesh.DeviceMesh`` of one dimension (``init_device_mesh("cpu",
    (2,))``, or a named dimension of a larger mesh, ``mesh["tp"]``); a process group; None (the
    default group, returned as None).

    Raises:
        ValueError: a mesh of more than one dimension (the message names its dimensions and
            the one-dimensional form to pass).
        TypeError: anything else, naming the accepted types and the given one, qualified.
    """
    if isinstance(device_mesh, DeviceMesh):
        if device_mesh.ndim != 1:
            raise ValueError(f"{name} must be one-dimensional for tensor parallelism, got "
                             f"distlab's mesh of shape {device_mesh.shape} "
                             f"{list(device_mesh.dim_names)}: pass mesh.get_group('tp')")
        return device_mesh.get_group(0)
    if isinstance(device_mesh, TorchDeviceMesh):
        if device_mesh.ndim != 1:
            names = device_mesh.mesh_dim_names
            named = f" {list(names)}" if names else ""
            pick = f"mesh[{names[-1]!r}]" if names else "a mesh built with mesh_dim_names"
            raise ValueError(f"{name} must be one-dimensional for tensor parallelism, got "
                             f"torch's mesh of shape {tuple(device_mesh.shape)}{named}: pass "
                             f"{pick}")
        return device_mesh.get_group()
    if device_mesh is None or isinstance(device_mesh, dist.ProcessGroup):
        return device_mesh
    raise TypeError(f"{name} must be {ACCEPTED}; got {_qualified(device_mesh)}")
