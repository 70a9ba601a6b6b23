"""Errors the pipeline raises: which stage failed on which item, which process died."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["PartLoadError", "PipelineError", "PipelineTimeoutError", "ProducerExitedError",
           "StageError", "WorkerExitedError"]

_MARK = re.compile(r"stage '(?P<stage>[^']*)' raised on item (?P<item>-?\d+)")


class PipelineError(RuntimeError):
    """Base class of the pipeline's run-time errors."""


class StageError(PipelineError):
    """A stage raised. ``stage`` is its name, ``item`` the item index, ``cause`` the original
    exception type name and message, ``traceback_text`` where it came from (may be from another
    process). The original exception is chained as ``__cause__`` when it was in this process.

    Also constructible from a single message (torch's DataLoader re-raises worker exceptions
    that way); ``stage``/``item`` are then parsed back from the message.
    """

    def __init__(self, stage: str, item: int | None = None, cause: str = "",
                 traceback_text: str = "") -> None:
        if item is None and not cause:
            m = _MARK.search(stage)
            self.stage: str | None = m["stage"] if m else None
            self.item: int | None = int(m["item"]) if m else None
            self.cause, self.traceback_text = "", stage
            super().__init__(stage)
            return
        self.stage, self.item, self.cause, self.traceback_text = stage, item, cause, traceback_text
        msg = f"stage '{stage}' raised on item {item}: {cause}"
        if traceback_text:
            msg += "\n" + traceback_text.rstrip()
        super().__init__(msg)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.stage or "", self.item, self.cause, self.traceback_text))


class PipelineTimeoutError(PipelineError, TimeoutError):
    """A stage call ran longer than the executor's ``timeout_s``. ``stage`` is its name, ``item``
    the item index, ``timeout_s`` the limit and ``ran_s`` how long it had run (seconds)."""

    def __init__(self, stage: str, item: int, timeout_s: float, executor: str = "",
                 ran_s: float | None = None) -> None:
        self.stage, self.item, self.timeout_s = stage, item, timeout_s
        self.executor, self.ran_s = executor, ran_s
        where = f" ({executor} executor)" if executor else ""
        ran = f" (running {ran_s:.1f} s)" if ran_s is not None else ""
        what = ("a stuck thread is abandoned, a stuck worker process is terminated"
                if executor else "")
        super().__init__(f"stage '{stage}' did not return within timeout_s={timeout_s:g} s on "
                         f"item {item}{ran}{where}; the pipeline was stopped"
                         + (f" ({what})" if what else ""))

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.stage, self.item, self.timeout_s, self.executor, self.ran_s))


class WorkerExitedError(PipelineError):
    """A worker process exited without being asked to (killed, crashed)."""

    def __init__(self, worker: int, exitcode: int | None, *, during_startup: bool = False) -> None:
        self.worker, self.exitcode = worker, exitcode
        self.during_startup = during_startup
        hint = ""
        if during_startup:
            hint = (" during start-up, before it was ready (its traceback is on stderr). Worker "
                    "processes are spawned: they re-import the main script, so a script that "
                    "runs a pipeline needs its code under `if __name__ == \"__main__\":`")
        super().__init__(f"worker process {worker} exited unexpectedly (exit code {exitcode})"
                         f"{hint}; the pipeline was stopped")


class PartLoadError(PipelineError):
    """The async part loader's producer raised while loading part ``part``."""

    def __init__(self, part: int, traceback_text: str) -> None:
        self.part, self.traceback_text = part, traceback_text
        super().__init__(f"producer failed loading part {part}:\n{traceback_text.rstrip()}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.part, self.traceback_text))


class ProducerExitedError(PipelineError):
    """The async part loader's producer process died (killed, crashed) without a result."""

    def __init__(self, exitcode: int | None, waiting_for: int) -> None:
        self.exitcode, self.waiting_for = exitcode, waiting_for
        super().__init__(f"producer process exited unexpectedly (exit code {exitcode}) while the "
                         f"trainer waited for part {waiting_for}")
