"""One entry point for a family of commands: ``python -m distlab.bench NAME [options]``.

:func:`dispatch` picks the command named by ``argv[0]``, imports the module that defines its
``main(argv)`` only then (so ``--help`` of one command never imports the others' heavy
dependencies twice), and runs it through :func:`~distlab.cli.run.run_main`. ``-h``/``--help``
lists the commands; no command or an unknown one prints one error line on stderr that names the
commands and ``--help`` (as every command's bad option does), exit 2.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence

from distlab.cli.options import HELP_HINT, plain_text
from distlab.cli.run import run_main

__all__ = ["dispatch", "usage"]


def usage(prog: str, commands: Mapping[str, str]) -> str:
    """``usage: prog {a,b,c} [options]``."""
    return f"usage: {prog} {{{','.join(commands)}}} [options]"


def dispatch(prog: str, doc: str, commands: Mapping[str, str], about: Callable[[str], str],
             argv: Sequence[str] | None = None, *, noun: str = "command") -> int:
    """Run the command ``argv[0]`` (``commands`` maps a name to the module defining its
    ``main(argv)``; ``about(name)`` is its one-line description for ``--help``; ``noun`` what
    the help and errors call one: "command", "benchmark"); returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help"):
        width = max(map(len, commands))
        lines = [usage(prog, commands), "", (plain_text(doc) or "").strip(), "", f"{noun}s:"]
        lines += [f"  {name:<{width}}  {about(name)}" for name in commands]
        lines += ["", f"`{prog} NAME --help` lists NAME's options and their defaults."]
        return run_main(prog, lambda _: print("\n".join(lines)), [])  # `| head`: no traceback
    if not args or args[0] not in commands:
        got = "none given" if not args else f"invalid choice {args[0]!r}"
        print(f"{prog}: error: argument {noun}: {got}: must be one of {', '.join(commands)} "
              f"{HELP_HINT}", file=sys.stderr)
        return 2
    module = commands[args[0]]  # imported inside run_main: Ctrl-C while torch loads is one line
    return run_main(f"{prog} {args[0]}",
                    lambda rest: importlib.import_module(module).main(rest), args[1:])
