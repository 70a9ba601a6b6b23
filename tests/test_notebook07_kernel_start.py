"""The notebook-07 runs outside the browser start a kernel again only when it never answered at
start (:data:`helpers.notebook07.KERNEL_STARTS`): a failing cell, or a kernel dying mid-run, is
raised at once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from nbclient.exceptions import CellExecutionError, DeadKernelError

import helpers.notebook07 as nb07


class _Client:
    """A NotebookClient whose ``async_execute`` raises the next error of ``errors`` (or returns
    when none is left), counting its starts."""

    errors: list[BaseException] = []
    starts = 0

    def __init__(self, nb: Any, **_: Any) -> None:
        self.nb = nb

    async def async_execute(self, **_: Any) -> None:
        type(self).starts += 1
        if type(self).errors:
            raise type(self).errors.pop(0)


def _run(monkeypatch: pytest.MonkeyPatch, errors: list[BaseException]) -> Any:
    client = type("Client", (_Client,), {"errors": list(errors), "starts": 0})
    monkeypatch.setattr(nb07, "NotebookClient", client)
    monkeypatch.setattr(nb07, "_notebook", lambda run: {"run": run})
    try:
        return asyncio.run(nb07._execute(nb07.Run())), client.starts
    except BaseException as e:   # noqa: BLE001 (the test reads which error came out)
        return e, client.starts


NEVER = RuntimeError("Kernel didn't respond in 60 seconds")


def test_a_kernel_that_never_answered_is_started_again(monkeypatch: pytest.MonkeyPatch) -> None:
    out, starts = _run(monkeypatch, [NEVER])
    assert out == {"run": nb07.Run()} and starts == 2


def test_kernel_starts_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    out, starts = _run(monkeypatch, [NEVER] * nb07.KERNEL_STARTS)
    assert out is NEVER and starts == nb07.KERNEL_STARTS


@pytest.mark.parametrize("error", [
    CellExecutionError("a cell failed", "AssertionError", "assert False"),
    DeadKernelError("Kernel died"),
    RuntimeError("something else"),
])
def test_any_other_failure_is_raised_at_once(monkeypatch: pytest.MonkeyPatch,
                                             error: BaseException) -> None:
    out, starts = _run(monkeypatch, [error])
    assert out is error and starts == 1
    assert not nb07.kernel_never_started(error)


def test_jupyter_clients_start_messages_are_recognised() -> None:
    assert nb07.kernel_never_started(NEVER)
    assert nb07.kernel_never_started(RuntimeError("Kernel died before replying to kernel_info"))
