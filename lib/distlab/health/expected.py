"""What NCCL should take on a box: the NCCL model's time per size for one run's setup.

The one place ``distlab.health`` calls the NCCL model: an all-reduce on one node or across nodes
(:func:`distlab.nccl.execution.nccl_execution`, ``NCCL_ALGO`` / ``NCCL_PROTO`` as restrictions),
an all-gather, reduce-scatter or broadcast on one node
(:func:`distlab.nccl.family.nccl_collective`, NCCL 2.28.9's choice). Anything else is not
priced, and :class:`NotPriced` says why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from distlab.health.setup import Setup
from distlab.nccl.execution import Execution, nccl_execution
from distlab.nccl.family import FAMILY, nccl_collective
from distlab.nccl.versions import DEFAULT_NCCL_VERSION, NCCL_CONSTANTS

__all__ = ["NotPriced", "Priced", "expected"]


class NotPriced(ValueError):
    """A run the model does not price: the sentence says what it lacks."""


@dataclass(frozen=True)
class Priced:
    """One size as the model runs it: ``seconds`` (the time nccl-tests would measure), NCCL's
    ``algorithm`` and ``protocol``."""

    nbytes: int
    seconds: float
    algorithm: str
    protocol: str


def expected(setup: Setup, collective: str, sizes: Sequence[int]) -> list[Priced]:
    """The model's time for each of ``sizes`` (nccl-tests' ``size``, bytes) under ``setup``.

    Raises:
        NotPriced: a collective, or a collective across nodes or on another release, the model
            does not hold; a size below 1 byte.
    """
    runs: Sequence[Execution]
    sizes = [int(s) for s in sizes]
    if not sizes or min(sizes) < 1:
        raise NotPriced("sizes must be >= 1 byte")
    if collective == "all_reduce":
        runs = nccl_execution(setup.box, setup.world_size, sizes, harness=setup.harness,
                              algorithms=setup.algorithms, protocols=setup.protocols,
                              nccl_version=setup.release.version, nodes=setup.nodes,
                              network=setup.network)  # type: ignore[arg-type]
    elif collective in FAMILY:
        if setup.nodes > 1:
            raise NotPriced(f"{collective} across nodes is not modelled (one node only)")
        if setup.release.version is not NCCL_CONSTANTS[DEFAULT_NCCL_VERSION]:
            raise NotPriced(f"{collective} is modelled with NCCL {DEFAULT_NCCL_VERSION}'s "
                            f"choice only; the run used {setup.release.asked}")
        if setup.algorithms is not None or setup.protocols is not None:
            raise NotPriced(f"{collective} under NCCL_ALGO / NCCL_PROTO is not modelled")
        runs = nccl_collective(setup.box, setup.world_size, sizes, collective,
                               harness=setup.harness)
    else:
        raise NotPriced(f"{collective} is not priced by the NCCL model (all_reduce; "
                        f"{', '.join(FAMILY)} on one node)")
    return [Priced(r.nbytes, r.seconds, r.algorithm, r.protocol) for r in runs]

