"""Message tags that keep one collective call's point-to-point messages apart from every other's.

gloo pairs a receive with a send by ``(peer, tag)`` in posting order. Every call of the executor
tags its messages ``base | index`` (:func:`call_tag_base`): ``base`` is a 15-bit value drawn from
the call's description (:func:`~distlab.collectives.runtime.peercheck.describe`) and this group's
call number, shifted past the 16 bits of the per-step message index
(:data:`distlab.collectives.runtime.rank_plan.MAX_TAG_INDEX`). So ranks that disagree about the call
(another algorithm, size or op: a bug the peer check reports) never pair each other's data messages
(which could corrupt a buffer, or make gloo close the connection on a size mismatch before the check
has spoken), and a message a failed call left behind can never be taken by a later call (a new call
number). The peer check's own messages use :data:`CHECK_TAG`, below every call's base. Tags are
ignored by NCCL, which matches in order.
"""

from __future__ import annotations

import hashlib
import weakref
from typing import Any

import torch.distributed as dist

from distlab.collectives.runtime.rank_plan import MAX_TAG_INDEX

__all__ = ["CHECK_TAG", "call_tag_base", "next_call_number"]

CHECK_TAG = 1  # the peer check's fingerprint messages (base 0, index 1)
_SALT_BITS = 15  # tags are non-negative int32: 15 bits of salt above 16 bits of index

_CALLS: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def next_call_number(group: Any) -> int:
    """This rank's count of executor calls on ``group`` so far (0 for the first); every rank
    of a group calls the executor the same number of times, so the numbers agree."""
    key = dist.GroupMember.WORLD if group is None else group
    n = _CALLS.get(key, 0)
    _CALLS[key] = n + 1
    return n


def call_tag_base(desc: dict[str, str], call: int) -> int:
    """``salt << 16`` with ``salt`` in ``[1, 2**15)`` from the call's description and number."""
    text = "|".join(f"{k}={desc[k]}" for k in sorted(desc)) + f"|call={call}"
    h = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
    salt = 1 + h % ((1 << _SALT_BITS) - 1)
    return salt * MAX_TAG_INDEX
