"""What every distlab command owes a user who gave it bad input: one ``error:`` line on stderr,
no traceback (and, where the caller checks it, nothing on stdout)."""

from __future__ import annotations


def one_error_line(err: str, *words: str, out: str | None = None) -> str:
    """The single ``error:`` line of ``err``, after checking it names every one of ``words``,
    that ``err`` holds no traceback and, when ``out`` is given, that stdout was empty."""
    assert out is None or out == "", out
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if "error:" in ln]
    assert len(lines) == 1, err
    assert all(w in lines[0] for w in words), (words, lines[0])
    return lines[0]
