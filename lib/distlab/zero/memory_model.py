"""Bytes of model state each rank holds under plain DDP and ZeRO stages 1, 2 and 3, with Adam.

The model states are the parameters, their gradients and the optimizer's state (Adam: two
moments, plus fp32 master weights when the parameters are 16-bit). Activations, communication
workspaces and the allocator's fragmentation are *not* model states and are not counted here
(the ZeRO paper calls them residual states).

Per parameter, with ``P`` parameters and ``N`` ranks (Rajbhandari et al., "ZeRO: Memory
Optimizations Toward Training Trillion Parameter Models", SC 2020, section 3.1 and figure 1):

============  ======  =====  =========================================  =====
precision     params  grads  optimizer (K)                               total
============  ======  =====  =========================================  =====
``fp32``      4       4      8 (exp_avg 4 + exp_avg_sq 4; no master)    16
``mixed``     2       2      12 (fp32 master 4 + exp_avg 4 + exp_avg_sq 4)  16
============  ======  =====  =========================================  =====

and what each stage shards (divides by ``N``): stage 0 (plain DDP) nothing; stage 1 the optimizer
state; stage 2 the optimizer state and the gradients; stage 3 all three. A sharded state holds
``ceil(P / N)`` elements per rank (the flat buffer is padded to a multiple of ``N``, so every rank
holds the same number), a replicated one ``P``.

:func:`deepspeed_estimate` gives DeepSpeed's published estimator formulas beside this model;
:data:`DEEPSPEED_SOURCES` says where they are and why they differ.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from distlab._checks import check_choice, check_float, check_int

__all__ = ["BYTE_UNITS", "DEEPSPEED_SOURCES", "PRECISIONS", "STAGES", "Stage3Memory",
           "StateBytes", "ZeroMemory", "byte_unit", "bytes_per_param", "check_stage",
           "deepspeed_estimate", "largest_model_that_fits", "shard_elements", "stage3_memory",
           "zero_memory"]

#: precision name -> bytes per parameter of (params, grads, optimizer state).
PRECISIONS: dict[str, tuple[int, int, int]] = {"fp32": (4, 4, 8), "mixed": (2, 2, 12)}
#: 0 is plain data parallel (DDP); 1, 2, 3 the ZeRO stages.
STAGES = (0, 1, 2, 3)
#: which states a stage shards, in (params, grads, optimizer) order.
_SHARDED = {0: (False, False, False), 1: (False, False, True), 2: (False, True, True),
            3: (True, True, True)}


#: Binary byte units, smallest first: (name, bytes per unit).
BYTE_UNITS: tuple[tuple[str, int], ...] = (("B", 1), ("KiB", 2**10), ("MiB", 2**20),
                                           ("GiB", 2**30), ("TiB", 2**40))


def byte_unit(values: Iterable[float]) -> tuple[str, int]:
    """The binary unit that fits byte counts ``values`` (>= 0): the largest unit of
    :data:`BYTE_UNITS` not above the geometric middle of the smallest and the largest positive
    value, so the values read as plain numbers around 1 to 1000 of it (4.2 MB -> ``"MiB"``,
    120 GB -> ``"GiB"``). Returns ``(name, bytes per unit)``; ``("B", 1)`` when no value is
    positive."""
    positive = [float(v) for v in values if v > 0]
    if not positive:
        return BYTE_UNITS[0]
    middle = math.sqrt(min(positive) * max(positive))
    return [u for u in BYTE_UNITS if u[1] <= middle][-1] if middle >= 1 else BYTE_UNITS[0]


def check_stage(stage: object) -> int:
    """``stage`` as an int in 0..3 (0 = plain DDP), else ``ValueError``/``TypeError`` naming it."""
    return check_int("stage", stage, minimum=0, maximum=3)


def bytes_per_param(precision: str) -> tuple[int, int, int]:
    """``(param, grad, optimizer)`` bytes per parameter for ``"fp32"`` or ``"mixed"``."""
    return PRECISIONS[check_choice("precision", precision, PRECISIONS)]


def shard_elements(params: int, world_size: int) -> int:
    """Elements of one rank's shard of ``params`` elements over ``world_size`` ranks:
    ``ceil(params / world_size)`` (the flat buffer is padded to a multiple of the world size)."""
    params = check_int("params", params, minimum=0)
    world_size = check_int("world_size", world_size, minimum=1)
    return -(-params // world_size)


@dataclass(frozen=True)
class StateBytes:
    """Bytes of each model state one rank holds (``total`` is their sum)."""

    params: int
    grads: int
    optimizer: int

    @property
    def total(self) -> int:
        """params + grads + optimizer, bytes."""
        return self.params + self.grads + self.optimizer


@dataclass(frozen=True)
class ZeroMemory(StateBytes):
    """:class:`StateBytes` of one rank plus what it was computed for."""

    param_count: int = 0
    world_size: int = 1
    stage: int = 0
    precision: str = "mixed"


def zero_memory(params: int, world_size: int, stage: int, precision: str = "mixed"
                ) -> ZeroMemory:
    """Model-state bytes per rank for ``params`` parameters on ``world_size`` ranks.

    Args:
        params: parameter count ``P`` (elements), >= 0.
        world_size: data-parallel ranks ``N``, >= 1.
        stage: 0 (plain DDP), 1 (optimizer state sharded), 2 (+ gradients), 3 (+ parameters).
        precision: ``"fp32"`` (4 + 4 + 8 bytes per parameter) or ``"mixed"`` (2 + 2 + 12).

    Raises:
        ValueError / TypeError: a bad argument, named with its value.
    """
    params = check_int("params", params, minimum=0)
    world_size = check_int("world_size", world_size, minimum=1)
    stage = check_stage(stage)
    per = bytes_per_param(precision)
    shard = shard_elements(params, world_size)
    b = [k * (shard if sharded else params) for k, sharded in zip(per, _SHARDED[stage],
                                                                   strict=True)]
    return ZeroMemory(params=b[0], grads=b[1], optimizer=b[2], param_count=params,
                      world_size=world_size, stage=stage, precision=precision)


@dataclass(frozen=True)
class Stage3Memory:
    """Peak model-state bytes of one ZeRO-3 rank: the shards it always holds plus the full
    units in flight (see :func:`stage3_memory`)."""

    states: StateBytes   # params, grads, optimizer shards (every unit padded to N)
    forward: int         # full buffers alive at the forward peak, bytes
    backward: int        # full buffers alive at the backward peak, bytes

    @property
    def in_flight(self) -> int:
        """The larger of the forward and backward in-flight bytes."""
        return max(self.forward, self.backward)

    @property
    def total(self) -> int:
        """Shards plus the in-flight peak, bytes."""
        return self.states.total + self.in_flight


def stage3_memory(unit_params: Sequence[int], world_size: int, precision: str = "mixed",
                  prefetch: int = 1) -> Stage3Memory:
    """Peak model-state bytes per rank of ZeRO-3 as :mod:`distlab.zero.stage3` runs it.

    Args:
        unit_params: parameters (elements) of each unit, in the order forward runs them.
        world_size: ranks ``N``; each unit is padded to a multiple of ``N`` and sharded.
        precision: ``"fp32"`` or ``"mixed"`` (bytes per parameter as :data:`PRECISIONS`).
        prefetch: units gathered ahead of the one computing (``L``).

    Shards: ``sum(ceil(n_u / N))`` elements of each state. In flight, full (padded) buffers:
    in forward, while unit ``k`` computes, units ``k .. k + L`` are gathered: the largest such
    window's parameter bytes. In backward (units in reverse order), unit ``k`` and the next
    ``L`` are gathered, unit ``k``'s full gradient buffer is being filled and the previous
    unit's is held by its reduce-scatter: those parameter bytes plus two units' gradient bytes.

    ``"mixed"`` is FSDP2's ``MixedPrecisionPolicy(param_dtype=bf16)``: the shards stay fp32
    (4 bytes of parameter, 4 of gradient, 8 of Adam's moments per sharded element, the
    optimizer stepping the parameter shard itself: 16 as the paper's 2 + 2 + 12), while the
    gathered units and full gradients are 2 bytes. Two shard-sized bf16 buffers join them: the
    all-gather input (the shard cast) of each of the ``L`` units issued ahead, alive until its
    gather runs, and in backward the previous unit's reduce-scatter output (``reduce_dtype``
    bf16) before it is added into the fp32 gradient shard.
    """
    world_size = check_int("world_size", world_size, minimum=1)
    prefetch = check_int("prefetch", prefetch, minimum=0)
    sizes = [check_int(f"unit_params[{i}]", n, minimum=0) for i, n in enumerate(unit_params)]
    p_b, g_b, o_b = bytes_per_param(precision)
    padded = [world_size * -(-n // world_size) for n in sizes]
    shard = sum(padded) // world_size
    mixed = precision == "mixed"
    # the shards in the parameters' own dtype (fp32); what the optimizer holds is its moments
    states = (StateBytes(4 * shard, 4 * shard, 8 * shard) if mixed
              else StateBytes(p_b * shard, g_b * shard, o_b * shard))
    window = prefetch + 1
    # bf16 shard copies: the all-gather inputs of the units issued ahead, the reduce output
    cast = p_b if mixed else 0

    def ahead(units: list[int]) -> int:
        return p_b * sum(units) + cast * sum(units[1:]) // world_size

    forward = max((ahead(padded[k:k + window]) for k in range(len(padded))), default=0)
    back = padded[::-1]
    backward = max((ahead(back[j:j + window]) + g_b * back[j]
                    + (g_b * back[j - 1] + cast * back[j - 1] // world_size if j else 0)
                    for j in range(len(back))), default=0)
    return Stage3Memory(states, forward, backward)


def largest_model_that_fits(memory_bytes: float, world_size: int, stage: int,
                            precision: str = "mixed", *, units: int | None = None,
                            prefetch: int = 1) -> int:
    """The largest parameter count whose model states fit in ``memory_bytes`` per rank
    (activations and buffers not counted: an upper bound on what trains).

    ``units`` (stage 3 only): the model is cut into that many equal units, and the full units
    in flight (:func:`stage3_memory` with ``prefetch``) must fit too; ``None`` counts the
    shards only, as the paper does.
    """
    memory_bytes = check_float("memory_bytes", memory_bytes, minimum=0.0)
    world_size = check_int("world_size", world_size, minimum=1)
    stage = check_stage(stage)
    if units is not None:
        units = check_int("units", units, minimum=1)
        if stage != 3:
            raise ValueError(f"units= counts stage 3's gathered units; stage {stage} has none")
    per = bytes_per_param(precision)
    full = sum(k for k, s in zip(per, _SHARDED[stage], strict=True) if not s)
    part = sum(k for k, s in zip(per, _SHARDED[stage], strict=True) if s)

    def total(p: int) -> int:
        if units is None:
            return zero_memory(p, world_size, stage, precision).total
        cut = [p // units + (1 if i < p % units else 0) for i in range(units)]
        return stage3_memory(cut, world_size, precision, prefetch).total

    # total(P) >= full P + part P / N, so the real-valued bound is an upper bound on the answer;
    # total is monotone in P: bisect below it
    lo, hi = 0, int(memory_bytes / (full + part / world_size)) + 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if total(mid) <= memory_bytes:
            lo = mid
        else:
            hi = mid
    return lo


#: Where DeepSpeed's estimators are and how they differ from the paper's model (ZeRO-2 changed).
DEEPSPEED_SOURCES = {
    2: ("deepspeed/runtime/zero/stage_1_and_2.py, estimate_zero2_model_states_mem_needs "
        "(https://github.com/microsoft/DeepSpeed/blob/master/deepspeed/runtime/zero/"
        "stage_1_and_2.py; documented at https://deepspeed.readthedocs.io/en/latest/memory.html): "
        "2P + 18P/N without offload, 18 = 2 fp16 grads + 4 fp32 grads + 4 fp32 params + 8 moments."
        " The paper counts 2P + 14P/N: DeepSpeed adds an fp32 copy of the gradient partition "
        "(the fp32 master's .grad, 4P/N). Earlier releases (deepspeed/runtime/zero/stage2.py, "
        "2021) estimated 4P + 16P/N: a full-size fp16 gradient buffer (2P) beside the fp16 "
        "params, and 16 = 4 + 4 + 8 per sharded parameter."),
    3: ("deepspeed/runtime/zero/stage3.py, estimate_zero3_model_states_mem_needs "
        "(https://github.com/microsoft/DeepSpeed/blob/master/deepspeed/runtime/zero/stage3.py): "
        "4 L + 18P/N without offload, L the largest layer's parameter count: that layer's fp16 "
        "params and grads are whole while it runs. The paper counts 16P/N and leaves the live "
        "layer to residual memory; 18 adds the fp32 gradient partition as for ZeRO-2 but "
        "counts no separate 16-bit gradient partition."),
}


def deepspeed_estimate(params: int, world_size: int, stage: int, *,
                       largest_layer: int = 0, release: str = "current") -> int:
    """GPU bytes per rank by DeepSpeed's estimator formulas, no offload, mixed precision
    (see :data:`DEEPSPEED_SOURCES`): ``stage`` 2 or 3 (DeepSpeed publishes no ZeRO-1 or DDP
    estimator). ``release`` ``"current"`` or ``"2021"`` (ZeRO-2 only: ``4P + 16P/N``).
    ``largest_layer`` (parameters) is used by stage 3 only. DeepSpeed truncates with ``int()``;
    so does this function."""
    params = check_int("params", params, minimum=0)
    world_size = check_int("world_size", world_size, minimum=1)
    stage = check_int("stage (DeepSpeed estimators exist for 2 and 3)", stage, minimum=2,
                      maximum=3)
    check_choice("release", release, ("current", "2021"))
    largest_layer = check_int("largest_layer", largest_layer, minimum=0)
    if stage == 3:
        return 4 * largest_layer + math.floor(18 * params / world_size)
    if release == "2021":
        return 4 * params + math.floor(16 * params / world_size)
    return 2 * params + math.floor(18 * params / world_size)
