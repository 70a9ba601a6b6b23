"""Uneven inputs across ranks: the bounded wait that turns a hang into an error, and the pieces of
torch's Join protocol that distlab's :class:`~distlab.ddp.DDP` and
:class:`~distlab.zero.ZeroDataParallel` share.

When one rank runs out of batches and leaves its training loop, the others wait in their next
gradient collective for a partner that never comes (torch's ``DistributedSampler`` pads or drops
so counts are equal; distlab's exact-evaluation sampler, filtering and sequence packing do not).
Two answers:

- **Join** (``torch.distributed.algorithms.Join``): inside ``with Join([model]):`` a rank that
  has run out of batches *shadows* the collectives of the others (zeros into every gradient
  collective) until every rank is done; then the model is broadcast from a last-joining rank.
  distlab's ``DDP`` and ``ZeroDataParallel`` are ``Joinable``; the hooks live beside them.
- **A bounded wait** (without Join): the gradient collectives of ``DDP`` and ``ZeroDataParallel``
  run on their own process group whose timeout is ``timeout`` seconds (30 by default), so the
  backend itself gives up on a collective nobody else joins. That matters on gloo: a wait with a
  timeout (``work.wait(timeout)``) raises but leaves the operation pending, and the process then
  hangs at exit in the process group's destructor (measured, torch 2.13); an operation that
  times out *in the backend* ends cleanly, the process exits, its connections close, and the
  other ranks' next collective (a barrier after the loop, say) fails at once with "Connection
  closed by peer" instead of waiting. The failed wait becomes :class:`UnevenInputsError`, which
  names the collective, the likely cause and the fix.

Pure helpers below; nothing here runs per step unless a Join is active.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from distlab._checks import check_float

__all__ = ["DEFAULT_TIMEOUT_S", "UnevenInputsError", "bounded_group", "broadcast_from",
           "check_timeout", "failure_kind", "last_joiner_rank", "run_bounded",
           "uneven_error"]

#: Seconds a gradient collective may wait for its peers before the rank gives up (a rank slower
#: than this by design, e.g. one saving a large checkpoint while the others go on, needs a larger
#: ``timeout``).
DEFAULT_TIMEOUT_S = 30.0


class UnevenInputsError(RuntimeError):
    """A gradient collective did not complete within the bounded wait (or its peer went away).

    ``rank``: this rank; ``what``: the collective (e.g. ``"allreduce of bucket 2 (3 params,
    1.5 MiB)"``); ``timeout_s``: the bound in seconds; ``elapsed_s``: how long it waited;
    ``kind``: :func:`failure_kind` of the backend's error. Uneven inputs and the bound are
    named only when the bound ran out; a peer that closed its connection (it failed or exited)
    or a size mismatch is named as such, with the seconds after which it failed."""

    def __init__(self, rank: int, what: str, timeout_s: float | None, cause: str,
                 elapsed_s: float | None = None) -> None:
        self.rank, self.what, self.timeout_s, self.elapsed_s = rank, what, timeout_s, elapsed_s
        self.kind = failure_kind(cause)
        if self.kind == "timeout":
            bound = (f"did not complete within {timeout_s:g} s" if timeout_s is not None
                     else "did not complete (process-group timeout)")
            after = f" (after {elapsed_s:.2f} s)" if elapsed_s is not None else ""
        else:  # it ended early: no bound ran out, so none is named
            bound = f"failed after {elapsed_s:.2f} s" if elapsed_s is not None else "failed"
            after = ""
        join = ("wrap the loop in `with torch.distributed.algorithms.Join([model]):` (distlab's "
                "DDP and ZeroDataParallel are Joinable)")
        if self.kind == "mismatch":
            likely = ("Likely cause: the ranks ran different collectives here (different "
                      "models, bucket settings or code paths), not uneven inputs.")
        elif self.kind == "peer":
            likely = ("Likely cause: another rank failed or exited (see its own error) before "
                      f"joining this collective. If it left because it ran out of batches "
                      f"(uneven inputs), {join}; if a rank is just slow, pass a larger "
                      "timeout= (seconds).")
        else:
            likely = (f"Likely cause: uneven inputs -- another rank ran out of batches and left "
                      f"its training loop, so no partner joins this collective. Fix: {join}, or "
                      "give every rank the same number of batches (torch's DistributedSampler "
                      "pads or drops). If a rank is just slow (a checkpoint save), pass a larger "
                      "timeout= (seconds).")
        super().__init__(f"rank {rank}: the {what} {bound}: {cause}{after}. " + likely)


def failure_kind(cause: str) -> str:
    """``"mismatch"`` (sizes differ across ranks), ``"peer"`` (a peer closed its connection),
    or ``"timeout"`` (the bound ran out, or anything else) for a backend's error text."""
    text = cause.lower()
    if "size" in text and ("match" in text or "mismatch" in text):
        return "mismatch"
    if "timed out" in text or "timeout" in text:
        return "timeout"
    if any(w in text for w in ("closed", "reset by peer", "broken pipe", "connection")):
        return "peer"
    return "timeout"


def check_timeout(timeout: Any) -> float | None:
    """``timeout`` in seconds (> 0) or ``None`` (use the process group's own timeout)."""
    if timeout is None:
        return None
    return check_float("timeout (s)", timeout, minimum=0.0, exclusive_minimum=True)


def bounded_group(group: Any, timeout_s: float | None) -> Any:
    """A process group over ``group``'s ranks (the default group for ``None``) whose collectives
    time out after ``timeout_s`` seconds in the backend itself; ``group`` unchanged for ``None``.

    Collective over ``group``'s members only (``use_local_synchronization``), so DDP built on a
    subgroup does not need the other ranks. Same backend, same ranks: results are bitwise those
    of ``group``."""
    if timeout_s is None:
        return group
    ranks = dist.get_process_group_ranks(group if group is not None else dist.group.WORLD)
    return dist.new_group(ranks, timeout=datetime.timedelta(seconds=timeout_s),
                          backend=dist.get_backend(group), use_local_synchronization=True)


def uneven_error(rank: int, what: str, timeout_s: float | None,
                 exc: BaseException, elapsed_s: float | None = None) -> UnevenInputsError:
    """The :class:`UnevenInputsError` for a failed wait on ``what`` (raise it ``from exc``)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return UnevenInputsError(rank, what, timeout_s, f"{type(exc).__name__}: {text[:160]}",
                             elapsed_s)


def run_bounded(rank: int, what: str, timeout_s: float | None, fn: Callable[..., Any],
                *args: Any) -> Any:
    """``fn(*args)`` (a collective or a wait on one, on a bounded group); a ``RuntimeError`` from
    the backend (its timeout, a peer gone) becomes :class:`UnevenInputsError` naming ``what``
    and the seconds it waited."""
    t0 = time.monotonic()
    try:
        return fn(*args)
    except UnevenInputsError:
        raise
    except RuntimeError as exc:
        raise uneven_error(rank, what, timeout_s, exc, time.monotonic() - t0) from exc


def last_joiner_rank(rank: int, is_last_joiner: bool, group: Any, device: torch.device) -> int:
    """The largest group rank among those with ``is_last_joiner`` (torch's
    ``_find_common_rank``): one allreduce (MAX) every rank of ``group`` calls."""
    t = torch.tensor([rank if is_last_joiner else -1], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    found = int(t.item())
    if found < 0:
        raise RuntimeError("Join: no rank reported itself as a last joiner")
    return found


def broadcast_from(tensors: Sequence[torch.Tensor], src: int, group: Any) -> None:
    """Broadcast every tensor from group rank ``src`` in place (the post-Join model sync)."""
    g = dist.get_global_rank(group, src) if group is not None else src
    with torch.no_grad():
        for t in tensors:
            dist.broadcast(t, src=g, group=group)
