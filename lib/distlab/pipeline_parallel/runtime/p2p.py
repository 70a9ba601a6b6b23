"""Point-to-point between pipeline ranks: tensor metadata, message tags, posted sends and
receives, and waits that end within a bound.

What crosses a stage boundary: the forward activations of a microbatch (stage ``s`` to
``s + 1``), and back the gradients of the floating-point ones (``s + 1`` to ``s``). Receives need
buffers of the right shape, so the first time a boundary carries a microbatch its sender first
sends a small int64 *header* (:func:`encode_meta`: how many tensors, each one's dtype and shape);
the receiver checks it against what its stage expects and keeps it, so later steps post their
receives directly. Gradients need no header: they have the shapes of the activations.

Tags keep messages apart on gloo, which matches a receive with the send of the same source and
tag: ``((microbatch * num_stages + boundary) * 3 + channel) * MAX_TENSORS + index``, where the
boundary is the lower stage of the pair and the channel is header, activation or gradient.

Waits are bounded by the process group's own timeout (the schedule makes a group of its own
whose backend timeout is ``timeout`` seconds, :func:`distlab.uneven.bounded_group`): a receive
whose sender never comes raises in the backend after ``timeout`` seconds and the process can
exit cleanly; a peer that failed closes its connections and the receive raises at once. Either
becomes :class:`PipelineCommError`, naming the action, the peer and the seconds waited. A rank
whose peer failed waits ``PEER_GRACE_S`` seconds before raising, so that the launcher
(:func:`distlab.launch.run`) reports the rank that failed first, with its own traceback.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from distlab.uneven import failure_kind

__all__ = ["HEADER_LEN", "MAX_TENSORS", "PEER_GRACE_S", "Channel", "PipelineCommError",
           "TensorMeta", "decode_meta", "describe", "encode_meta", "message_tag", "metas_of"]

MAX_TENSORS = 16
"""The most tensors one stage may pass to the next (a tuple output)."""
HEADER_LEN = 128
"""int64 elements of a metadata header."""
PEER_GRACE_S = 1.0
"""Seconds a rank whose peer failed waits before raising (the peer's report goes first)."""

_CHANNELS = {"header": 0, "activation": 1, "gradient": 2}
_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
           torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool, torch.complex64,
           torch.complex128)
_MAGIC = 0x5050  # "PP": a header, not stray data


@dataclass(frozen=True)
class TensorMeta:
    """Shape and dtype of one tensor passed between stages."""

    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def is_floating(self) -> bool:
        """True where a gradient flows back for it (floating or complex dtype)."""
        return self.dtype.is_floating_point or self.dtype.is_complex

    def __str__(self) -> str:
        return f"{tuple(self.shape)} {str(self.dtype).replace('torch.', '')}"


def metas_of(tensors: tuple[torch.Tensor, ...]) -> tuple[TensorMeta, ...]:
    """The :class:`TensorMeta` of each tensor."""
    return tuple(TensorMeta(tuple(t.shape), t.dtype) for t in tensors)


def describe(metas: tuple[TensorMeta, ...]) -> str:
    """``"(4, 16) float32"`` for one tensor, ``"[(4, 16) float32, (4,) int64]"`` for more."""
    if len(metas) == 1:
        return str(metas[0])
    return "[" + ", ".join(str(m) for m in metas) + "]"


def encode_meta(metas: tuple[TensorMeta, ...]) -> torch.Tensor:
    """The int64 header of ``metas``: magic, count, then per tensor dtype code, ndim, dims.

    Raises:
        ValueError: more than :data:`MAX_TENSORS` tensors, a dtype without a code, or more
            dims in all than the header holds.
    """
    if len(metas) > MAX_TENSORS:
        raise ValueError(f"a stage passes {len(metas)} tensors to the next; at most "
                         f"{MAX_TENSORS} are allowed")
    words = [_MAGIC, len(metas)]
    for m in metas:
        if m.dtype not in _DTYPES:
            raise ValueError(f"dtype {m.dtype} cannot cross a stage boundary; allowed: "
                             f"{', '.join(str(d) for d in _DTYPES)}")
        words += [_DTYPES.index(m.dtype), len(m.shape), *m.shape]
    if len(words) > HEADER_LEN:
        raise ValueError(f"the shapes {describe(metas)} need {len(words)} header words; at "
                         f"most {HEADER_LEN}")
    out = torch.zeros(HEADER_LEN, dtype=torch.int64)
    out[:len(words)] = torch.tensor(words, dtype=torch.int64)
    return out


def decode_meta(header: torch.Tensor) -> tuple[TensorMeta, ...]:
    """The metas :func:`encode_meta` wrote into ``header``."""
    words = header.tolist()
    if words[0] != _MAGIC:
        raise RuntimeError(f"pipeline metadata header has magic {words[0]}, not {_MAGIC}: the "
                           "ranks disagree on what is sent (different plans or models?)")
    out, i = [], 2
    for _ in range(words[1]):
        code, ndim = words[i], words[i + 1]
        out.append(TensorMeta(tuple(words[i + 2:i + 2 + ndim]), _DTYPES[code]))
        i += 2 + ndim
    return tuple(out)


def message_tag(channel: str, boundary: int, microbatch: int, index: int,
                num_stages: int) -> int:
    """The tag of tensor ``index`` of ``channel`` (``"header"``, ``"activation"``,
    ``"gradient"``) across the boundary between stages ``boundary`` and ``boundary + 1``."""
    return (((microbatch * num_stages + boundary) * len(_CHANNELS) + _CHANNELS[channel])
            * MAX_TENSORS + index)


class PipelineCommError(RuntimeError):
    """A pipeline send or receive failed: its peer failed or exited, or it did not complete
    within the process group's timeout.

    ``rank``: this process's global rank; ``what``: the action (``"1RECV_F2 from rank 0"``);
    ``kind``: ``"peer"`` (the peer closed its connection), ``"timeout"`` or ``"mismatch"``;
    ``elapsed_s``: seconds waited."""

    def __init__(self, rank: int, what: str, timeout_s: float | None, cause: str,
                 elapsed_s: float) -> None:
        self.rank, self.what, self.timeout_s, self.elapsed_s = rank, what, timeout_s, elapsed_s
        self.kind = failure_kind(cause)
        if self.kind == "peer":
            likely = ("the peer rank failed or exited (see its own error); this rank stopped "
                      "instead of waiting")
        elif self.kind == "mismatch":
            likely = "the ranks sent and received different sizes (different models or plans?)"
        else:
            likely = ("the peer never sent it: a rank stuck or much slower than the others, or "
                      "ranks running different plans; a slow rank needs a larger timeout= "
                      "(seconds)")
        if self.kind == "timeout" and timeout_s is not None:
            how = f"did not complete within {timeout_s:g} s (waited {elapsed_s:.2f} s)"
        else:
            how = f"failed after {elapsed_s:.2f} s"
        super().__init__(f"rank {rank}: pipeline {what} {how}: {cause}. Likely cause: "
                         f"{likely}.")


class Channel:
    """Sends and receives of one pipeline rank on ``group`` (the bounded group), to and from
    pipeline ranks named by their rank in that group.

    Args:
        group: the process group p2p runs on (``None``: the default group).
        global_ranks: the global rank of each pipeline rank, in pipeline-rank order.
        timeout_s: the group's backend timeout in seconds (for messages), ``None`` if unknown.
    """

    def __init__(self, group: Any, global_ranks: list[int], timeout_s: float | None) -> None:
        self.group = group
        self.global_ranks = list(global_ranks)
        self.timeout_s = timeout_s
        self.rank = dist.get_rank() if dist.is_initialized() else 0

    def isend(self, tensor: torch.Tensor, peer: int, tag: int) -> Any:
        """Post a send of ``tensor`` to pipeline rank ``peer``; the work to wait on. A post
        that fails at once (the backend refuses it: the peer already closed its connection)
        raises :class:`PipelineCommError` as a failed wait does."""
        try:
            return dist.isend(tensor, dst=self.global_ranks[peer], group=self.group, tag=tag)
        except RuntimeError as exc:
            raise self._failed(exc, f"send (tag {tag}) to pipeline rank {peer}", 0.0) from exc

    def irecv(self, tensor: torch.Tensor, peer: int, tag: int) -> Any:
        """Post a receive into ``tensor`` from pipeline rank ``peer``; the work to wait on (a
        post that fails at once raises as in :meth:`isend`)."""
        try:
            return dist.irecv(tensor, src=self.global_ranks[peer], group=self.group, tag=tag)
        except RuntimeError as exc:
            raise self._failed(exc, f"receive (tag {tag}) from pipeline rank {peer}",
                               0.0) from exc

    def _failed(self, exc: RuntimeError, what: str, elapsed_s: float) -> PipelineCommError:
        """``exc`` of the backend as :class:`PipelineCommError` naming ``what``, after
        :data:`PEER_GRACE_S` seconds when the peer went away."""
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        err = PipelineCommError(self.rank, what, self.timeout_s,
                                f"{type(exc).__name__}: {text[:200]}", elapsed_s)
        if err.kind == "peer":
            time.sleep(PEER_GRACE_S)
        return err

    def wait(self, works: list[Any], what: str) -> None:
        """Wait for every work in ``works``; a failure becomes :class:`PipelineCommError`
        naming ``what`` (after :data:`PEER_GRACE_S` seconds when a peer went away)."""
        t0 = time.monotonic()
        try:
            for w in works:
                w.wait()
        except RuntimeError as exc:
            raise self._failed(exc, what, time.monotonic() - t0) from exc
