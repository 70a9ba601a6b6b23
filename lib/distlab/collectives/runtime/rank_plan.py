"""One rank's view of a schedule, precomputed once and reused by every call of the executor:
which messages it sends and receives in each step, where incoming data lands, where outgoing
data is read from, and when its own sends must finish. Pure (no process group, no torch), so it
is tested on any machine.

The executor posts the receives of a rank's next step while the current one is still in flight
(so a sender never waits for the receiver to get round to posting). Incoming data therefore
lands in one of two workspace halves (by the parity of the rank's step), or straight in the
tensor for a one-range copy where no element of it is sent by this rank in the same step or
received in its previous one. Where such a copy lands in elements the previous step *sent*, its
receive is ``deferred``: posted once that step's sends have finished instead of ahead, so nothing
overwrites what is still being sent, and the message is not landed in the workspace and copied
over (a ring's all-gather on two ranks, where the copy cost a tenth of the call). A message of
several ranges (a packed step) is packed into a staging area of the workspace before it is sent.

A call may also hand the executor a read-only *source* for part of the buffer (``source``: the
element range it covers, e.g. a reduce-scatter's input, which the call must not modify): the
buffer's elements there are taken from the source until this rank first writes them. Sends of
elements still in the source read the source directly, and a reduction into them reads the
source and writes the tensor (``out = op(source, incoming)``), so no copy of the input is ever
made up front; a range partly written and partly not is first filled from the source (``fill``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from distlab.collectives.plan.schedule import Schedule, Step

__all__ = ["MAX_TAG_INDEX", "Message", "RankPlan", "RankStep", "pair_tags", "rank_plan"]

MAX_TAG_INDEX = 1 << 16  # messages from one rank to another in one step (the tag's low bits)

Span = tuple[int, int]


@dataclass(frozen=True)
class Message:
    """One message of a step as this rank sends or receives it.

    Attributes:
        peer: the other rank (group rank): the receiver of a send, the sender of a receive.
        tag: the message's index among the step's messages between the same two ranks.
        ranges: ``(start, stop, kind, from_source)`` buffer ranges in message order. For a
            send, ``from_source`` means "read from the source"; for a received ``"reduce"``,
            "reduce with the source's elements into the tensor" (the tensor's are not yet
            written); ``kind`` is the transfer's ``"reduce"`` or ``"copy"``.
        offset: workspace offset of the message's data (a receive's landing place, a packed
            send's staging), or ``None``: a one-range message read from (send) or received into
            (receive) its place directly.
        deferred: a receive into its place that is posted only after this rank's previous
            step's sends have finished (they read those elements), not ahead of it.
    """

    peer: int
    tag: int
    ranges: tuple[tuple[int, int, str, bool], ...]
    offset: int | None
    deferred: bool = False

    @property
    def count(self) -> int:
        """Elements in the message."""
        return sum(b - a for a, b, _, _ in self.ranges)


@dataclass(frozen=True)
class RankStep:
    """One step as one rank executes it.

    ``fill``: ranges copied from the source into the tensor before the step's sends are posted;
    ``sends_first_needed``: index of the first receive whose elements one of this step's sends
    reads from the tensor (those sends must finish before the receive is applied), or
    ``len(recvs)``.
    """

    index: int
    label: str
    sends: tuple[Message, ...]
    recvs: tuple[Message, ...]
    sends_first_needed: int
    fill: tuple[Span, ...] = ()


@dataclass(frozen=True)
class RankPlan:
    """A rank's steps (those where it sends or receives), its workspace size in elements (two
    receive halves of ``half`` elements, then the send staging area at ``staging``), and the
    source ranges it never wrote (``untouched``: still only in the source after the last step)."""

    steps: tuple[RankStep, ...]
    scratch: int
    half: int = 0
    staging: int = 0
    untouched: tuple[Span, ...] = ()


def pair_tags(pairs: list[tuple[int, int]]) -> list[int]:
    """Per ``(src, dst)`` pair, its index among the equal pairs before it."""
    seen: dict[tuple[int, int], int] = {}
    out = []
    for key in pairs:
        out.append(seen.get(key, 0))
        seen[key] = out[-1] + 1
    if out and max(out) >= MAX_TAG_INDEX:
        raise ValueError(f"a step sends {max(out) + 1} messages from one rank to another; the "
                         f"executor tags at most {MAX_TAG_INDEX} (use fewer pieces)")
    return out


def _overlap(a: int, b: int, spans: list[Span]) -> bool:
    return any(x < b and a < y for x, y in spans)


class _Written:
    """The elements this rank has written so far, as sorted disjoint spans."""

    def __init__(self, source: Span | None) -> None:
        self.spans: list[Span] = []
        self.source = source

    def add(self, a: int, b: int) -> None:
        out, lo, hi = [], a, b
        for x, y in self.spans:
            if y < lo or hi < x:
                out.append((x, y))
            else:
                lo, hi = min(lo, x), max(hi, y)
        out.append((lo, hi))
        self.spans = sorted(out)

    def in_source(self, a: int, b: int) -> list[Span]:
        """The parts of ``[a, b)`` that still live only in the source."""
        if self.source is None:
            return []
        lo, hi = max(a, self.source[0]), min(b, self.source[1])
        out, pos = [], lo
        for x, y in self.spans:
            if y <= pos or x >= hi:
                continue
            if x > pos:
                out.append((pos, x))
            pos = max(pos, y)
        if pos < hi:
            out.append((pos, hi))
        return out


@dataclass(frozen=True)
class _DraftMessage:
    """A message before its workspace place is final: ``offset`` is within its area."""

    peer: int
    tag: int
    ranges: tuple[tuple[int, int, str, bool], ...]
    offset: int | None
    deferred: bool = False


@dataclass(frozen=True)
class _DraftStep:
    """A rank's step before the workspace halves are laid out: ``land`` is the elements its
    receives need in their half."""

    index: int
    label: str
    sends: tuple[_DraftMessage, ...]
    recvs: tuple[_DraftMessage, ...]
    sends_first_needed: int
    fill: tuple[Span, ...]
    land: int


def _placed(m: _DraftMessage, base: int) -> Message:
    return Message(m.peer, m.tag, m.ranges, None if m.offset is None else base + m.offset,
                   m.deferred)


def _messages(step: Step) -> list[tuple[int, int, int, tuple]]:
    """``(src, dst, tag, transfers)`` per message of the step."""
    msgs = step.messages()
    tags = pair_tags([(src, dst) for src, dst, _ in msgs])
    return [(src, dst, tag, ts) for (src, dst, ts), tag in zip(msgs, tags, strict=True)]


@functools.lru_cache(maxsize=512)
def rank_plan(schedule: Schedule, rank: int, source: Span | None = None) -> RankPlan:
    """What ``rank`` does in each step of ``schedule``: the executor's precomputed view.

    ``source``: the buffer range ``[start, stop)`` a read-only source holds at the start (see
    the module docstring), or ``None`` when the tensor holds the whole buffer.
    """
    written = _Written(source)
    raw: list[_DraftStep] = []
    prev_sent: list[Span] = []  # this rank's ranges in its previous step: sent
    prev_received: list[Span] = []  # and received
    staging = 0
    for index, step in enumerate(schedule.steps):
        msgs = _messages(step)
        mine_out = [m for m in msgs if m[0] == rank]
        mine_in = [m for m in msgs if m[1] == rank]
        if not mine_out and not mine_in:
            continue
        fill: list[Span] = []
        sends: list[_DraftMessage] = []
        tensor_reads: list[Span] = []
        stage = 0
        for _, dst, tag, ts in mine_out:
            ranges = []
            for t in ts:
                left = written.in_source(t.start, t.stop)
                whole = left == [(t.start, t.stop)]
                if left and not whole:  # partly written: bring the rest over first
                    fill += left
                    for a, b in left:
                        written.add(a, b)
                ranges.append((t.start, t.stop, t.kind, whole))
                if not whole:
                    tensor_reads.append((t.start, t.stop))
            offset = None
            if len(ranges) > 1:
                offset, stage = stage, stage + sum(b - a for a, b, _, _ in ranges)
            sends.append(_DraftMessage(dst, tag, tuple(ranges), offset))
        staging = max(staging, stage)
        send_spans = [(t.start, t.stop) for *_, ts in mine_out for t in ts]
        recvs: list[_DraftMessage] = []
        first: int | None = None
        land = 0
        for i, (src, _, tag, ts) in enumerate(mine_in):
            ranges = []
            for t in ts:
                if _overlap(t.start, t.stop, tensor_reads) and first is None:
                    first = i
                from_source = False
                if t.kind == "reduce":
                    left = written.in_source(t.start, t.stop)
                    from_source = left == [(t.start, t.stop)]
                    if left and not from_source:
                        fill += left
                        for a, b in left:
                            written.add(a, b)
                ranges.append((t.start, t.stop, t.kind, from_source))
            direct = (len(ts) == 1 and ts[0].kind == "copy"
                      and not _overlap(ts[0].start, ts[0].stop, send_spans + prev_received))
            offset = None
            if not direct:
                offset, land = land, land + sum(t.count for t in ts)
            deferred = direct and _overlap(ts[0].start, ts[0].stop, prev_sent)
            recvs.append(_DraftMessage(src, tag, tuple(ranges), offset, deferred))
        for *_, ts in mine_in:
            for t in ts:
                written.add(t.start, t.stop)
        raw.append(_DraftStep(index, step.label, tuple(sends), tuple(recvs),
                              len(recvs) if first is None else first, tuple(fill), land))
        prev_sent = send_spans
        prev_received = [(t.start, t.stop) for *_, ts in mine_in for t in ts]
    half = max((d.land for d in raw), default=0)
    halves = half * min(2, len(raw))
    steps = [RankStep(d.index, d.label, tuple(_placed(m, halves) for m in d.sends),
                      tuple(_placed(m, half * (j % 2)) for m in d.recvs),
                      d.sends_first_needed, d.fill)
             for j, d in enumerate(raw)]
    untouched = tuple(written.in_source(*source)) if source is not None else ()
    return RankPlan(tuple(steps), halves + staging, half, halves, untouched)
