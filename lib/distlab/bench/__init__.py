"""Benchmarks: ``python -m distlab.bench <what> [options]``; each compares against a reference.

Each benchmark is a module here with ``main(argv: list[str] | None) -> int``; see
``python -m distlab.bench --help`` for the list.
"""
