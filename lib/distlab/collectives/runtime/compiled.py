"""The compiled plan executor: one rank's whole plan in one C++ call, the GIL released.

The Python executor (:class:`~distlab.collectives.runtime.steps.StepRunner`) wakes Python for
every ``isend``/``irecv``/wait and every reduction of a step. ``csrc/plan_executor.cpp`` runs the
same :class:`~distlab.collectives.runtime.rank_plan.RankPlan` in the same order on the process
group's backend (``c10d::Backend::send``/``recv`` on gloo; on NCCL each step one coalesced group)
with the same ATen reductions, so both give bitwise-equal results; it is what every untraced call
runs (:func:`distlab.collectives.runtime.execute.execute`, ``executor="auto"``). The Python
executor stays for stepping, tracing a step's spans, and as the reference.

It is built with ``torch.utils.cpp_extension`` (ninja and the C++ compiler torch was built for)
once per environment, torch release and source, into a folder of the environment
(:mod:`~distlab.collectives.runtime.extension_build`: ``<sys.prefix>/share/distlab/extensions``,
or ``DISTLAB_EXTENSIONS_DIR``); later processes import the built file directly, whatever ninja
``PATH`` finds; ``make install`` builds it once (:func:`status`). A build interrupted or crashed
never blocks the next one (the lock dies with its holder). Where it cannot be built, or another
process's build takes longer than ``DISTLAB_BUILD_WAIT_S`` seconds (default 300), one line on
stderr says why (once per process) and every call runs the Python executor, which exchanges the
same messages, so ranks on either executor work together. ``DISTLAB_EXECUTOR=python`` in the
environment turns it off.

The plan travels as one int64 CPU tensor, encoded once per plan (:func:`encode`)::

    nsteps, scratch,
    per step:  index, sends_first_needed, nfill, nsends, nrecvs,
               nfill x (start, stop),
               (nsends + nrecvs) x message
    message:   peer, tag, offset (-1: read or received in place; -2: received in place, posted
               once the previous step's sends have finished), nranges,
               nranges x (start, stop, reduce (1) / copy (0), from_source (0/1))
"""

from __future__ import annotations

import datetime
import os
import sys
from collections import OrderedDict
from pathlib import Path
from typing import Any

import torch

from distlab.collectives.runtime.extension_build import BuildWaitTimeout, load_or_build
from distlab.collectives.runtime.rank_plan import Message, RankPlan

__all__ = ["EXECUTORS", "OPS", "SOURCE", "CompiledStepError", "available", "build",
           "check_executor", "compiled_plan", "encode", "resolved", "status", "timeout_ms"]

SOURCE = Path(__file__).with_name("csrc") / "plan_executor.cpp"
"""The extension's one source file."""
NAME = "distlab_plan_executor"
"""The extension's module name."""
EXECUTORS = ("auto", "compiled", "python")
"""``auto``: compiled where it works and the call is not traced; ``compiled``: the same, but a
traced call is an error; ``python``: always the Python executor."""
OPS = {"sum": 0, "avg": 0, "prod": 1, "max": 2, "min": 3}
"""The C++ executor's op codes (``avg`` sums; the caller divides)."""

_STATE: dict[str, Any] = {"module": None, "error": None}
_PLANS: OrderedDict[int, tuple[RankPlan, Any]] = OrderedDict()
_MAX_PLANS = 512


class CompiledStepError(RuntimeError):
    """A step of the compiled executor failed: ``index`` is the plan step's index (``-1``: the
    peer check before step 0, ``-2``: the end of the peer check)."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index


def check_executor(executor: Any) -> str:
    """Validate ``executor`` (one of :data:`EXECUTORS`) at a public boundary."""
    if not isinstance(executor, str) or executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {list(EXECUTORS)}, got {executor!r}")
    return executor


CFLAGS = ("-O2",)
"""The extension's extra compiler flags."""
DEFAULT_BUILD_WAIT_S = 300.0
"""Seconds a process waits for another's build before it runs the Python executor."""


def build_wait_s() -> float:
    """``DISTLAB_BUILD_WAIT_S`` (seconds, > 0) or :data:`DEFAULT_BUILD_WAIT_S`."""
    text = os.environ.get("DISTLAB_BUILD_WAIT_S", "").strip()
    try:
        value = float(text) if text else DEFAULT_BUILD_WAIT_S
    except ValueError:
        value = DEFAULT_BUILD_WAIT_S
    return value if value > 0 else DEFAULT_BUILD_WAIT_S


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def build() -> Any:
    """Load the environment's build of the extension, building it first where there is none;
    raises what the build raises, or :class:`~distlab.collectives.runtime.extension_build.\
BuildWaitTimeout` when another process's build outlasts :func:`build_wait_s`."""
    return load_or_build(NAME, SOURCE, CFLAGS, wait_s=build_wait_s(), say=_say)


def _module() -> Any:
    """The loaded extension, or ``None`` (the reason in ``_STATE["error"]``, said once)."""
    if _STATE["module"] is not None or _STATE["error"] is not None:
        return _STATE["module"]
    if os.environ.get("DISTLAB_EXECUTOR", "").strip().lower() == "python":
        _STATE["error"] = "DISTLAB_EXECUTOR=python"
        return None
    try:
        _STATE["module"] = build()
    except BuildWaitTimeout as exc:
        _STATE["error"] = f"BuildWaitTimeout: {exc}"
        _say(f"distlab: the compiled plan executor is not built yet ({exc}); collectives run on "
             "the Python executor")
    except Exception as exc:  # no compiler, no ninja, headers that do not match...
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
        _STATE["error"] = f"{type(exc).__name__}: {first[:200]}"  # so never tried again
        _say(f"distlab: the compiled plan executor could not be built ({_STATE['error']}); "
             "collectives run on the Python executor")
    return _STATE["module"]


def available() -> bool:
    """Whether the compiled executor can run here (builds or loads it on the first call)."""
    return _module() is not None


def resolved(executor: str) -> str:
    """What an untraced call with ``executor`` runs here: ``"compiled"`` or ``"python"``
    (``"auto"``: compiled where it is available)."""
    if check_executor(executor) == "auto":
        return "compiled" if available() else "python"
    return executor


def status() -> str:
    """``"compiled"`` or ``"python (<why>)"``: what an untraced call runs in this process."""
    return "compiled" if available() else f"python ({_STATE['error']})"


def _message(m: Message) -> list[int]:
    place = (-2 if m.deferred else -1) if m.offset is None else m.offset
    out = [m.peer, m.tag, place, len(m.ranges)]
    for a, b, kind, from_source in m.ranges:
        out += [a, b, 1 if kind == "reduce" else 0, 1 if from_source else 0]
    return out


def encode(plan: RankPlan) -> torch.Tensor:
    """``plan`` as the int64 tensor the C++ executor reads (layout in the module doc)."""
    out = [len(plan.steps), plan.scratch]
    for st in plan.steps:
        out += [st.index, st.sends_first_needed, len(st.fill), len(st.sends), len(st.recvs)]
        for a, b in st.fill:
            out += [a, b]
        for m in (*st.sends, *st.recvs):
            out += _message(m)
    return torch.tensor(out, dtype=torch.int64)


def compiled_plan(plan: RankPlan) -> Any:
    """The extension's ``CompiledPlan`` of ``plan``, parsed once per plan object (the plans come
    from :func:`~distlab.collectives.runtime.rank_plan.rank_plan`'s cache, so a repeated call
    finds its own)."""
    module = _module()
    if module is None:
        raise RuntimeError(f"the compiled executor is not available here: {_STATE['error']}")
    key = id(plan)
    hit = _PLANS.get(key)
    if hit is not None and hit[0] is plan:
        _PLANS.move_to_end(key)
        return hit[1]
    compiled = module.CompiledPlan(encode(plan))
    _PLANS[key] = (plan, compiled)
    if len(_PLANS) > _MAX_PLANS:
        _PLANS.popitem(last=False)
    return compiled


def timeout_ms(timeout: datetime.timedelta | None) -> int:
    """A wait bound in ms for the C++ executor (0: the process group's own timeout)."""
    if timeout is None:
        return 0
    return max(1, int(round(timeout.total_seconds() * 1000)))


def step_error(exc: RuntimeError) -> CompiledStepError | None:
    """The step a C++ failure names (``distlab-step:<index>:<message>``), or ``None``."""
    text = str(exc)
    at = text.find("distlab-step:")
    if at < 0:
        return None
    index, _, message = text[at + len("distlab-step:"):].partition(":")
    try:
        return CompiledStepError(int(index), message.strip())
    except ValueError:
        return None
