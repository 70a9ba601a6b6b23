"""Detect ranks that call one collective with different arguments, before anything hangs.

Every rank of a collective must run the same schedule (collective, algorithm, options (a root
is one of them), element count) with the same dtype and op; if one rank asks for ``ring`` and
another for ``tree``, their point-to-point messages never pair up and both wait until the
process group times out (or, worse, pair up wrongly and return garbage). Two ways to check,
both raising :class:`CollectiveMismatchError` on every rank, naming the ranks and the fields
that differ:

- ``"inline"`` (the default on gloo, :class:`InlineCheck`): each rank sends its description
  (:func:`encode`, :data:`MESSAGE_BYTES` bytes) to every other rank *in the same round as the
  schedule's first step*: posted with the first step's messages and compared before the rank waits
  for any of them. No extra round trip: the descriptions travel while the first step's data does.
  The data messages carry a tag drawn from the description
  (:mod:`distlab.collectives.runtime.tags`), so ranks that disagree never pair each other's data.
  Costs ``p - 1`` tiny messages each way per call. After a mismatch, the failed call's unmatched
  messages stay posted under that call's tags (no later call can take them).
- ``"gather"`` (:func:`check_peers`; what NCCL gets, whose point-to-point has no tags, and what
  ``check="gather"`` asks for): one ``all_gather`` of :data:`FIELDS` hashes (8 bytes each)
  before the first step, so a mismatch is found before any data message is posted. One extra
  round trip per call.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from distlab.collectives.runtime.group import wait
from distlab.collectives.runtime.tags import CHECK_TAG

__all__ = ["CHECK_MODES", "FIELDS", "MESSAGE_BYTES", "CollectiveMismatchError", "InlineCheck",
           "check_mode", "check_peers", "decode", "describe", "encode", "fingerprint",
           "mismatch_message"]

FIELDS = ("collective", "algorithm", "options", "world_size", "count", "dtype", "op")
MESSAGE_BYTES = 512
CHECK_MODES = ("inline", "gather", "off")


class CollectiveMismatchError(RuntimeError):
    """Ranks of one group called a collective with different arguments (see
    :mod:`distlab.collectives.runtime.peercheck`)."""


def check_mode(check: Any) -> str:
    """``True`` -> ``"inline"``, ``False`` -> ``"off"``, or one of :data:`CHECK_MODES`."""
    if check is True:
        return "inline"
    if check is False:
        return "off"
    if isinstance(check, str) and check in CHECK_MODES:
        return check
    raise ValueError(f"check must be True, False or one of {list(CHECK_MODES)}, got {check!r}")


def describe(algorithm: str, options: dict[str, Any], world_size: int, count: int,
             dtype: Any, op: str, *, collective: str = "all_reduce") -> dict[str, str]:
    """The readable form of a call, one string per name of :data:`FIELDS` (a rooted
    collective's root is one of its ``options``)."""
    opts = ", ".join(f"{k}={v!r}" for k, v in sorted(options.items()))
    return {"collective": collective, "algorithm": str(algorithm), "options": "{" + opts + "}",
            "world_size": str(int(world_size)), "count": str(int(count)),
            "dtype": str(dtype).replace("torch.", ""), "op": str(op)}


def _h63(text: str) -> int:
    """A stable (not per-process salted) 63-bit hash of ``text``."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") >> 1


def fingerprint(desc: dict[str, str]) -> list[int]:
    """One int64 per field of :data:`FIELDS`, equal iff the descriptions are equal (up to 63-bit
    hash collisions of the strings)."""
    return [_h63(desc[name]) for name in FIELDS]


def encode(desc: dict[str, str]) -> bytes:
    """``desc`` as exactly :data:`MESSAGE_BYTES` bytes (JSON, zero-padded). A field too long to
    fit is replaced by ``#`` and its hash, so equal descriptions still encode equally and
    different ones differently."""
    fields = dict(desc)
    raw = json.dumps([fields[k] for k in FIELDS]).encode()
    if len(raw) > MESSAGE_BYTES:
        for name in sorted(FIELDS, key=lambda k: -len(fields[k])):
            fields[name] = f"#{_h63(fields[name]):016x}"
            raw = json.dumps([fields[k] for k in FIELDS]).encode()
            if len(raw) <= MESSAGE_BYTES:
                break
    return raw.ljust(MESSAGE_BYTES, b"\0")


def decode(data: bytes) -> dict[str, str]:
    """Inverse of :func:`encode` (long fields come back as their hashes)."""
    return dict(zip(FIELDS, json.loads(bytes(data).rstrip(b"\0").decode()), strict=True))


class InlineCheck:
    """The inline peer check of one call: descriptions exchanged with every peer.

    Create it (which posts the receives and sends) before the schedule's first step, call
    :meth:`verify` before waiting for any data message, and :meth:`finish` at the end of the
    call (waits for its own sends).

    Args:
        desc: this rank's :func:`describe`.
        group: the process group (``None``: world).
        rank, world: this rank's group rank and the group size.
        peer: maps a group rank to the global rank.
        timeout: bound on every wait (``None``: the group's).
    """

    def __init__(self, desc: dict[str, str], group: Any, rank: int, world: int,
                 peer: Callable[[int], int], timeout: datetime.timedelta | None) -> None:
        self.rank, self.world, self.group, self.timeout = rank, world, group, timeout
        self.mine = torch.frombuffer(bytearray(encode(desc)), dtype=torch.uint8)
        self.theirs = torch.empty((world, MESSAGE_BYTES), dtype=torch.uint8)
        others = [q for q in range(world) if q != rank]
        self.recvs = [dist.irecv(self.theirs[q], peer(q), group=group, tag=CHECK_TAG)
                      for q in others]
        self.sends = [dist.isend(self.mine, peer(q), group=group, tag=CHECK_TAG)
                      for q in others]
        self.verified = False

    def verify(self) -> None:
        """Wait for every peer's description; raise :class:`CollectiveMismatchError` (on every
        rank: each has every description) if any differs."""
        if self.verified:
            return
        for work in self.recvs:
            wait(work, self.timeout)
        self.verified = True
        self.theirs[self.rank] = self.mine
        if bool((self.theirs == self.mine).all()):
            return
        descs = [decode(row.numpy().tobytes()) for row in self.theirs]
        raise CollectiveMismatchError(mismatch_message(descs, self.rank))

    def finish(self) -> None:
        """Verify if not yet done, then wait for this rank's own sends."""
        self.verify()
        for work in self.sends:
            wait(work, self.timeout)


def check_peers(desc: dict[str, str], group: Any, device: Any,
                timeout: datetime.timedelta | None) -> None:
    """The ``"gather"`` check (collective): raise :class:`CollectiveMismatchError` on every rank
    if any two ranks of ``group`` passed different ``desc`` (from :func:`describe`).

    ``device`` is where the gather runs (CPU for gloo, this rank's GPU for NCCL); ``timeout``
    bounds the wait (``None``: the group's own timeout). Cost when all agree: one all_gather of
    ``8 * len(FIELDS)`` bytes per rank.
    """
    world = dist.get_world_size(group)
    if world == 1:
        return
    mine = torch.tensor(fingerprint(desc), dtype=torch.int64, device=device)
    table = [torch.empty_like(mine) for _ in range(world)]
    work = dist.all_gather(table, mine, group=group, async_op=True)
    wait(work, timeout)
    rows = torch.stack(table).cpu()
    if bool((rows == rows[0]).all()):
        return
    # every rank sees the same table, so every rank takes this branch together
    descs: list[Any] = [None] * world
    dist.all_gather_object(descs, desc, group=group)
    raise CollectiveMismatchError(mismatch_message(descs, dist.get_rank(group)))


def mismatch_message(descs: list[dict[str, str]], rank: int) -> str:
    """The error text for per-rank descriptions ``descs`` (group ranks), seen from ``rank``."""
    parts = []
    for name in FIELDS:
        values: dict[str, list[int]] = {}
        for r, d in enumerate(descs):
            values.setdefault(d[name], []).append(r)
        if len(values) > 1:
            parts.append(f"{name}: " + "; ".join(f"ranks {_ranks(rs)} use {v}"
                                                 for v, rs in values.items()))
    calls = " / ".join(dict.fromkeys(d["collective"] for d in descs))
    return (f"collective mismatch seen on rank {rank}: the ranks of this group called {calls} "
            f"with different arguments, which would hang until the timeout. Differences: "
            + " | ".join(parts) + ". Call it with the same collective, algorithm, options, "
            "tensor size, dtype and op on every rank.")


def _ranks(rs: list[int]) -> str:
    return ",".join(str(r) for r in rs)
