"""Build stage lists by name (for the benchmark CLI, the widgets and the notebooks)."""

from __future__ import annotations

from typing import Any

from distlab._checks import check_choice, check_int
from distlab.loading.data_stages import CollateStage, DecodeStage, ReadStage
from distlab.loading.device_stages import ComputeStage, H2DStage, PinStage
from distlab.loading.shards import ShardSet
from distlab.loading.stage import Stage
from distlab.loading.synthetic_stages import BurnStage, IdentityStage, SleepStage

__all__ = ["EQUAL_KINDS", "STAGE_KINDS", "equal_stages", "loading_stages", "make_stage"]

STAGE_KINDS = ("read", "decode", "collate", "pin", "h2d", "compute", "sleep", "burn", "identity")


def make_stage(kind: str, *, cost_s: float = 0.0, name: str | None = None,
               shards: ShardSet | None = None, batch_size: int = 8) -> Stage:
    """One stage of a built-in ``kind`` (see :data:`STAGE_KINDS`); ``cost_s`` in seconds is its
    cost (the added latency for ``read``); ``shards`` is required for ``read``."""
    check_choice("stage kind", kind, STAGE_KINDS)
    kw: dict[str, Any] = {"name": name or kind}
    if kind == "read":
        if shards is None:
            raise ValueError("stage kind 'read' needs shards= (a ShardSet; see write_shards)")
        return ReadStage(shards, batch_size=batch_size, latency_s=cost_s, **kw)
    if kind == "decode":
        return DecodeStage(cost_s, **kw)
    if kind == "collate":
        return CollateStage(**kw)
    if kind == "pin":
        return PinStage(**kw)
    if kind == "h2d":
        return H2DStage(**kw)
    if kind == "compute":
        return ComputeStage(cost_s, **kw)
    if kind == "sleep":
        return SleepStage(cost_s, **kw)
    if kind == "burn":
        return BurnStage(cost_s, **kw)
    return IdentityStage(**kw)


EQUAL_KINDS = ("sleep", "burn", "work", "identity")


def equal_stages(kind: str = "sleep", n: int = 3, cost_s: float = 0.002) -> list[Stage]:
    """``n`` stages of one kind and equal cost named ``<kind>0 .. <kind>{n-1}``; the last is
    placed on the host (it is the consumer). Kinds: ``sleep`` (I/O stand-in), ``burn`` (CPU for
    ``cost_s`` of wall time), ``work`` (a calibrated amount of CPU work, see
    :func:`~.stages.burn`), ``identity`` (zero cost)."""
    n = check_int("n", n, minimum=1)
    check_choice("kind", kind, EQUAL_KINDS)
    if kind == "work":
        stages: list[Stage] = [BurnStage(cost_s, name=f"work{i}", fixed_work=True)
                               for i in range(n)]
    else:
        stages = [make_stage(kind, cost_s=cost_s, name=f"{kind}{i}") for i in range(n)]
    stages[-1].placement = "host"
    return stages


def loading_stages(shards: ShardSet, *, batch_size: int = 8, read_latency_s: float = 0.002,
                   decode_s: float = 0.002, compute_s: float = 0.002,
                   compute_mode: str = "burn") -> list[Stage]:
    """The seed's pipeline: read -> decode -> collate -> pin -> h2d -> compute
    (``compute_mode`` as :class:`ComputeStage` takes it: burn, wait or train)."""
    return [ReadStage(shards, batch_size, read_latency_s), DecodeStage(decode_s), CollateStage(),
            PinStage(), H2DStage(), ComputeStage(compute_s, mode=compute_mode)]
