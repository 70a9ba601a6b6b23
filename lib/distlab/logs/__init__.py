"""Logs users bring, read as the facts they state (nothing priced here).

- :mod:`.nccl_tests`: nccl-tests' text and ``-J`` JSON output, every binary.
"""
