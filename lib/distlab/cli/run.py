"""One way every distlab command ends: an exit status and at most one line on stderr.

    def main(argv: list[str] | None = None) -> int:
        return run_main("python -m distlab.judge refit", _work, argv)

:func:`run_main` calls the command's work with its arguments and turns

- a :class:`UsageError` (bad input the user can fix: a file that is not a profile, a length
  longer than the data) into ``prog: error: <message> (see --help)`` and exit 2, as argparse
  does for a bad option (argparse's own exit 2 and ``--help``'s exit 0 pass through unchanged);
- Ctrl-C (``KeyboardInterrupt``) into ``prog: interrupted by Ctrl-C; <what happened>`` and exit
  130, the shell's code for SIGINT. Commands that start processes stop them on the way out
  (:mod:`distlab.launch` and the executors do), so no traceback and no process is left;
- a closed stdout (``... | head``) into a quiet exit 0: the rest of the output goes nowhere;
- ranks that did not return in time (:class:`distlab.launch.LaunchTimeoutError`) into ``prog:
  error: <which ranks, how long; every rank was stopped>`` and exit 1: not a bug of the command
  and not bad input, so neither a traceback nor exit 2.

Any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence

from distlab.cli.options import HELP_HINT

__all__ = ["INTERRUPTED", "TIMED_OUT", "UsageError", "run_main", "usage_line"]

INTERRUPTED = 130
"""The exit status of a command stopped by Ctrl-C (128 + SIGINT)."""
TIMED_OUT = 1
"""The exit status of a command whose ranks did not return within its timeout."""


class UsageError(ValueError):
    """Bad input the user can fix; :func:`run_main` prints its message as one line, exit 2."""


def usage_line(prog: str, exc: BaseException) -> str:
    """The one line a :class:`UsageError` prints: ``prog: error: message (see --help)``.

    Args:
        prog: the command as typed (``python -m distlab.plan``).
        exc: the error; its message is put on one line (newlines and runs of spaces become one
            space), and a leading ``prog: error:`` or exception-class prefix it already carries
            is not repeated.

    Returns:
        The line, ending with :data:`~distlab.cli.options.HELP_HINT` once.
    """
    text = " ".join(str(exc).split())
    for prefix in (f"{prog}: error:", f"{type(exc).__name__}:"):
        text = text.removeprefix(prefix).strip()
    if not text.endswith(HELP_HINT):
        text = f"{text} {HELP_HINT}"
    return f"{prog}: error: {text}"


def run_main(prog: str, work: Callable[[list[str]], int | None],
             argv: Sequence[str] | None = None, *,
             on_interrupt: str = "nothing more was measured or written") -> int:
    """Run ``work(argv)`` (``argv`` defaults to ``sys.argv[1:]``) and return its exit status
    (None counts as 0), ending as the module docstring says. ``on_interrupt`` completes the
    Ctrl-C line: what the command left behind."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        return int(work(args) or 0)
    except BrokenPipeError:  # the reader went away (``| head``): stop printing, no traceback
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print(f"{prog}: interrupted by Ctrl-C; {on_interrupt}", file=sys.stderr)
        return INTERRUPTED
    except UsageError as exc:
        print(usage_line(prog, exc), file=sys.stderr)
        return 2
    except TimeoutError as exc:
        from distlab.launch import LaunchTimeoutError  # launch imports torch: only when needed

        if not isinstance(exc, LaunchTimeoutError):
            raise
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return TIMED_OUT
    except SystemExit as exc:  # argparse: exit 2 for a bad option, 0 for --help
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
