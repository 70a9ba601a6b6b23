"""Execute a schedule on real ranks over ``torch.distributed`` point-to-point, in place.

    import distlab.collectives as C
    C.all_reduce(t, op="sum", algorithm="ring")          # inside an initialized process group

CPU tensors go over gloo (``isend``/``irecv``); CUDA tensors over NCCL (each step one
``batch_isend_irecv`` group). On gloo the receives of a rank's next step are posted while its
current step is still in flight (a sender never waits for the receiver to get round to posting: gloo
sends only into a posted receive), every receive of a step before any of its sends, so an exchange
cannot deadlock. Received ``"reduce"`` data lands in a preallocated workspace (two halves,
alternating by step) and is combined into the tensor in place (``add_``, ``mul_``,
``maximum``/``minimum`` with ``out=``) as each message arrives (after this rank's own sends of the
same elements have completed), so a step cut into pieces (:mod:`distlab.collectives.plan.ranges`)
reduces each piece while the next is in flight; ``"copy"`` data is received straight into the tensor
where nothing of this rank reads or writes those elements in that step or the one before. Every
message carries a tag unique to the call (:mod:`distlab.collectives.runtime.tags`), and the peer
check travels with the first step (:mod:`distlab.collectives.runtime.peercheck`). Every wait has a
timeout (``timeout`` seconds, else the process group's), so a rank that dies mid-collective makes
the others raise instead of hanging.
"""

from __future__ import annotations

import datetime
import functools
from typing import Any

import torch
import torch.distributed as dist

from distlab.collectives.algorithms.registry import build, check_algorithm, options_of
from distlab.collectives.model.choice import best_pieces
from distlab.collectives.plan.ops import check_op, check_op_dtype
from distlab.collectives.plan.schedule import Schedule
from distlab.collectives.runtime import compiled
from distlab.collectives.runtime.group import check_tensor_backend, group_info, reducer
from distlab.collectives.runtime.peercheck import (
    MESSAGE_BYTES,
    CollectiveMismatchError,
    InlineCheck,
    check_mode,
    check_peers,
    decode,
    describe,
    encode,
    mismatch_message,
)
from distlab.collectives.runtime.steps import StepRunner, reducer_out, step_p2p_ops
from distlab.collectives.runtime.tags import CHECK_TAG, call_tag_base, next_call_number
from distlab.timeline import Timeline

__all__ = ["all_reduce", "check_tensor_alone", "check_timeout", "default_options", "execute",
           "run_schedule", "step_p2p_ops", "traced_allreduce_rank"]


@functools.lru_cache(maxsize=256)
def _cached_build(algorithm: str, world_size: int, count: int,
                  options: tuple[tuple[str, Any], ...]) -> Schedule:
    return build(algorithm, world_size, count, **dict(options))


def check_tensor_alone(tensor: Any, op: str, name: str = "tensor") -> None:
    """Checks that need no process group: type, contiguity, op/dtype."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if not tensor.is_contiguous():
        raise ValueError(f"{name} must be contiguous (got strides {tuple(tensor.stride())} for "
                         f"shape {tuple(tensor.shape)}); call .contiguous() first")
    check_op_dtype(op, tensor.dtype)


def check_timeout(timeout: Any) -> datetime.timedelta | None:
    """Validate ``timeout`` (seconds > 0 or ``None``) and return it as a ``timedelta``."""
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not timeout > 0):
        raise ValueError(f"timeout must be a positive number of seconds or None, got {timeout!r}")
    return None if timeout is None else datetime.timedelta(seconds=float(timeout))


def _check_call(schedule: Any, tensor: Any, op: str, group: Any,
                timeout: float | None) -> tuple[int, int, datetime.timedelta | None]:
    """Validate a :func:`run_schedule` call; returns ``(rank, world, wait timeout)``."""
    if not isinstance(schedule, Schedule):
        raise TypeError(f"schedule must be a Schedule, got {type(schedule).__name__}")
    check_tensor_alone(tensor, op)
    rank, world, backend = group_info(group)
    check_tensor_backend(tensor, backend)
    if schedule.world_size != world:
        raise ValueError(f"schedule is for world_size={schedule.world_size} but the group has "
                         f"{world} ranks")
    if schedule.count != tensor.numel():
        raise ValueError(f"schedule is for count={schedule.count} elements but tensor has "
                         f"{tensor.numel()}")
    return rank, world, check_timeout(timeout)


def uses_compiled(executor: str, timeline: Timeline | None) -> bool:
    """Whether a call with ``executor`` (:data:`~distlab.collectives.runtime.compiled.EXECUTORS`)
    runs on the compiled executor: ``"auto"`` where it is available and the call is not traced,
    ``"compiled"`` always (an error for a traced call, or where it cannot be built)."""
    executor = compiled.check_executor(executor)
    if executor == "python":
        return False
    if executor == "compiled":
        if timeline is not None:
            raise ValueError("executor='compiled' runs a plan in one call and records no step "
                             "spans; trace with executor='python' (or 'auto')")
        if not compiled.available():
            raise RuntimeError(f"executor='compiled': {compiled.status()}")
        return True
    return timeline is None and compiled.resolved(executor) == "compiled"


def execute(schedule: Schedule, flat: torch.Tensor, op: str, group: Any, rank: int, world: int,
            timeout: datetime.timedelta | None, *, timeline: Timeline | None = None,
            batched: bool = False, check: str = "inline",
            source: tuple[torch.Tensor, tuple[int, int]] | None = None,
            executor: str = "auto") -> StepRunner:
    """Run ``schedule`` on this rank's flat buffer in place (arguments already validated; no
    ``avg`` division): the one executor behind every collective of :mod:`distlab.collectives`.

    ``check`` is a mode of :mod:`distlab.collectives.runtime.peercheck` (``"inline"`` on a batched,
    NCCL-style call runs as ``"gather"``: NCCL's point-to-point has no tags to keep a mismatched
    call's messages apart). ``source``: a read-only tensor holding the buffer's elements ``[start,
    stop)`` until this rank writes them (:mod:`distlab.collectives.runtime.rank_plan`).
    ``executor``: ``"auto"`` (the compiled executor, :mod:`~distlab.collectives.runtime.compiled`,
    unless the call is traced or it cannot be built here), ``"compiled"`` or ``"python"``; both
    give bitwise-equal results. Returns the runner (its ``plan.untouched`` says which source
    ranges the steps never wrote).
    """
    desc = describe(schedule.algorithm, schedule.options, world, schedule.count, flat.dtype, op,
                    collective=schedule.collective)
    base = call_tag_base(desc, next_call_number(group))
    runner = StepRunner(schedule, flat, reducer(op), reducer_out(op), group, rank, timeout, base,
                        source, timeline)
    if check == "gather" or (check == "inline" and batched):
        try:
            check_peers(desc, group, flat.device, timeout)
        except CollectiveMismatchError:
            raise
        except Exception as exc:
            raise runner.failed("the peer check before step 0", exc) from exc
    if uses_compiled(executor, timeline):
        _run_compiled(runner, desc, op, group, rank, world, batched, check)
        return runner
    if batched:
        runner.run_batched()
        return runner
    inline = None
    if check == "inline" and world > 1:
        try:
            inline = InlineCheck(desc, group, rank, world, runner.peer, timeout)
        except Exception as exc:
            raise runner.failed("the peer check before step 0", exc) from exc
    runner.run_posted_ahead(inline)
    if inline is not None:
        runner.verify(inline)  # a rank with no step of its own still checks
        try:
            inline.finish()
        except Exception as exc:
            raise runner.failed("the end of the peer check", exc) from exc
    return runner


def _run_compiled(runner: StepRunner, desc: dict[str, str], op: str, group: Any, rank: int,
                  world: int, batched: bool, check: str) -> None:
    """:func:`execute`'s compiled branch (after the gather check): the inline peer check and
    every step in one C++ call."""
    plan = compiled.compiled_plan(runner.plan)
    mine = theirs = None
    if check == "inline" and not batched and world > 1:
        mine = torch.frombuffer(bytearray(encode(desc)), dtype=torch.uint8)
        theirs = torch.empty((world, MESSAGE_BYTES), dtype=torch.uint8)
    try:
        agreed = plan.run(dist.group.WORLD if group is None else group, runner.flat,
                          runner.scratch, runner.source, runner.source_at, compiled.OPS[op],
                          runner.base, compiled.timeout_ms(runner.timeout), batched, mine,
                          theirs, CHECK_TAG)
    except RuntimeError as exc:
        err = compiled.step_error(exc)
        if err is None:
            raise
        where = {-1: "the peer check before step 0", -2: "the end of the peer check"}.get(
            err.index) or next(f"step {rs.index} ({rs.label})" for rs in runner.plan.steps
                               if rs.index == err.index)
        raise runner.failed(where, err) from exc
    if not agreed:
        assert theirs is not None
        descs = [decode(row.numpy().tobytes()) for row in theirs]
        raise CollectiveMismatchError(mismatch_message(descs, rank))


def run_schedule(schedule: Schedule, tensor: torch.Tensor, op: str = "sum", group: Any = None,
                 *, timeline: Timeline | None = None, timeout: float | None = None,
                 batched: bool | None = None, check: bool | str = True,
                 executor: str = "auto") -> torch.Tensor:
    """Execute ``schedule`` on this rank's ``tensor`` in place and return it.

    Every rank of ``group`` must call it with the same schedule and op. ``timeline`` gets one
    span per step on lane ``"rank<r>/allreduce"`` (the collective's name without underscores;
    on CUDA each step is synchronized first so its span is true device time). ``timeout``
    (seconds) bounds every wait; ``None`` uses the process group's timeout. ``batched`` posts
    each step as one ``batch_isend_irecv`` (what NCCL needs: one ``ncclGroupStart/End`` per step
    so exchanges cannot deadlock); ``None`` means "for CUDA tensors". gloo accepts it too, which
    is how the NCCL code path is tested without a GPU. Unbatched, the receives of each step are
    posted while the previous step is still in flight.

    ``check`` (:mod:`distlab.collectives.runtime.peercheck`): ``True`` or ``"inline"`` (default)
    sends this rank's description of the call (algorithm, options, world size, count, dtype, op) to
    every other rank together with the first step's messages and raises
    :class:`~distlab.collectives.runtime.peercheck.CollectiveMismatchError` naming the ranks and
    what differs, instead of hanging; ``"gather"`` does it with one all_gather before the first
    step; ``False`` (or ``"off"``) skips it.

    ``executor``: ``"auto"`` (default: the compiled executor,
    :mod:`~distlab.collectives.runtime.compiled`, for an untraced call where it can be built,
    else the Python one), ``"compiled"`` or ``"python"``. Both give bitwise-equal results.
    """
    op = check_op(op)
    mode = check_mode(check)
    compiled.check_executor(executor)
    rank, world, wait_td = _check_call(schedule, tensor, op, group, timeout)
    flat = tensor.view(-1)
    execute(schedule, flat, op, group, rank, world, wait_td, timeline=timeline,
            batched=flat.is_cuda if batched is None else bool(batched), check=mode,
            executor=executor)
    if op == "avg":
        flat.div_(world)
    return tensor


def all_reduce(tensor: torch.Tensor, op: str = "sum", algorithm: str = "ring", group: Any = None,
               *, timeline: Timeline | None = None, timeout: float | None = None,
               batched: bool | None = None, check: bool | str = True,
               executor: str = "auto", **options: Any) -> torch.Tensor:
    """Allreduce ``tensor`` in place across ``group`` with the named algorithm; returns it.

    Args:
        tensor: a contiguous tensor, CPU (gloo group) or this rank's CUDA device (NCCL group),
            same shape and dtype on every rank.
        op: ``"sum"``, ``"prod"``, ``"max"``, ``"min"`` or ``"avg"`` (floating dtypes only).
        algorithm: a key of :data:`distlab.collectives.ALGORITHMS`. group: a process group, ``None``
        for the default (world). timeline: optional :class:`distlab.timeline.Timeline`; one span per
        step. timeout: seconds each wait may take (``None``: the process group's timeout). batched:
        post each step as one ``batch_isend_irecv`` (default: only for CUDA/NCCL). check: the peer
        check (:mod:`distlab.collectives.runtime.peercheck`): ``True``/``"inline"`` (default: each
        rank's
            description of the call travels with the first step's messages; no extra round
            trip), ``"gather"`` (one small all_gather before the first step) or ``False``; a
            mismatch raises ``CollectiveMismatchError`` on every rank, naming the ranks and what
            differs, instead of hanging.
        executor: ``"auto"`` (default: compiled for an untraced call where it can be built),
            ``"compiled"`` or ``"python"`` (:func:`run_schedule`).
        **options: algorithm options (``segment_size`` for segmented_ring, ``group_size`` for
            hierarchical, ``pieces`` for ring, segmented_ring and hierarchical). A ``pieces`` left
            unset (or ``None``) is the one the calibrated cost model predicts fastest for this
            algorithm, world size and size (:func:`distlab.collectives.model.choice.best_pieces`;
            the shipped loopback calibration unless :func:`~distlab.collectives.model.choice.
            use_calibration` set another).

    Raises:
        TypeError / ValueError: bad arguments (unknown algorithm, non-contiguous tensor, wrong
            device for the backend, avg on integers, group_size not dividing the world size...).
        RuntimeError: not initialized, or a peer failed or timed out during a step.
        CollectiveMismatchError (a RuntimeError): ranks disagree on the call (``check`` on).
    """
    op = check_op(op)
    algorithm = check_algorithm(algorithm)
    check_tensor_alone(tensor, op)
    _, world, backend = group_info(group)
    check_tensor_backend(tensor, backend)
    options = default_options(algorithm, world, tensor.numel(), tensor.element_size(), options)
    try:
        key = tuple(sorted(options.items()))
        hash(key)
    except TypeError:
        schedule = build(algorithm, world, tensor.numel(), **options)
    else:
        schedule = _cached_build(algorithm, world, tensor.numel(), key)
    return run_schedule(schedule, tensor, op, group, timeline=timeline, timeout=timeout,
                        batched=batched, check=check, executor=executor)


def default_options(algorithm: str, world: int, count: int, itemsize: int,
                    options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with an unset ``pieces`` filled in by the cost model (for the algorithms that
    take it; :func:`distlab.collectives.model.choice.best_pieces`)."""
    if "pieces" in options_of(algorithm) and options.get("pieces") is None and world > 1:
        others = {k: v for k, v in options.items() if k != "pieces"}
        pieces = best_pieces(algorithm, world, count, itemsize,
                             options=others or None)
        return {**others, "pieces": pieces}
    return dict(options)


def traced_allreduce_rank(rank: int, world_size: int, algorithm: str, count: int,
                          options: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """A :func:`distlab.launch.run` rank function: one allreduce of ``count`` ones recorded into a
    Timeline (one span per step); returns the spans as dicts."""
    tl = Timeline()
    all_reduce(torch.ones(count), algorithm=algorithm, timeline=tl, **(options or {}))
    return tl.to_dicts()
