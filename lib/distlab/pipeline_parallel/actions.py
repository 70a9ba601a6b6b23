"""What a pipeline-parallel rank does at one step of a schedule: an :class:`Action`.

An action is ``(stage, kind, microbatch)``, written as torch.distributed.pipelining writes its
``_Action``: ``"2F0"`` is the forward of stage 2 on microbatch 0, ``"1SEND_B3"`` stage 1 sending
the input gradient of microbatch 3 to the stage before it. Kinds:

- compute: ``F`` forward, ``B`` full backward (input and weight gradients at once), ``I``
  backward to the input only, ``W`` the weight gradient left by an earlier ``I`` (zero-bubble
  schedules split ``B`` into ``I`` then ``W``);
- communication: ``SEND_F``/``RECV_F`` move a forward activation from stage ``s`` to ``s + 1``,
  ``SEND_B``/``RECV_B`` an input gradient from stage ``s`` to ``s - 1``. A send is named by the
  stage that sends, a receive by the stage that receives (as torch names them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum


class Kind(str, Enum):
    """The kind of an action; its value is torch's ``_ComputationType`` spelling."""

    FORWARD = "F"
    FULL_BACKWARD = "B"
    BACKWARD_INPUT = "I"
    BACKWARD_WEIGHT = "W"
    SEND_F = "SEND_F"
    RECV_F = "RECV_F"
    SEND_B = "SEND_B"
    RECV_B = "RECV_B"

    @property
    def is_compute(self) -> bool:
        """True for ``F``, ``B``, ``I`` and ``W``."""
        return self in COMPUTE_KINDS

    @property
    def is_backward(self) -> bool:
        """True for ``B``, ``I`` and ``W``."""
        return self in (Kind.FULL_BACKWARD, Kind.BACKWARD_INPUT, Kind.BACKWARD_WEIGHT)


COMPUTE_KINDS = frozenset({Kind.FORWARD, Kind.FULL_BACKWARD, Kind.BACKWARD_INPUT,
                           Kind.BACKWARD_WEIGHT})
"""The kinds that compute (the rest move tensors between ranks)."""

# torch's shorthand for the compute kinds
F, B, W = Kind.FORWARD, Kind.FULL_BACKWARD, Kind.BACKWARD_WEIGHT
I = Kind.BACKWARD_INPUT  # noqa: E741

_PATTERN = re.compile(r"^(\d+)(SEND_F|RECV_F|SEND_B|RECV_B|F|B|I|W)(\d+)$")


@dataclass(frozen=True, order=True)
class Action:
    """One action of one rank: ``kind`` on ``stage`` (global stage index, from 0) for
    ``microbatch`` (from 0)."""

    stage: int
    kind: Kind
    microbatch: int

    def __str__(self) -> str:
        return f"{self.stage}{self.kind.value}{self.microbatch}"

    def __repr__(self) -> str:
        return str(self)

    @classmethod
    def parse(cls, text: str) -> Action:
        """``"2F0"`` -> ``Action(2, Kind.FORWARD, 0)`` (torch's spelling of an action).

        Raises:
            ValueError: ``text`` is not ``<stage><kind><microbatch>``.
        """
        match = _PATTERN.match(text.strip())
        if match is None:
            raise ValueError(f"action {text!r} is not <stage><kind><microbatch>, e.g. '2F0' or "
                             f"'1SEND_B3'; kinds: {', '.join(k.value for k in Kind)}")
        stage, kind, microbatch = match.groups()
        return cls(int(stage), Kind(kind), int(microbatch))
