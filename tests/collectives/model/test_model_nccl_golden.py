"""The NCCL model gives, bit for bit, the numbers it gave before its per-size pipeline was shared
by the one-node, multi-node and other-collective models: every case of
``tests/helpers/nccl_grid.py``'s small grid (every box, world sizes, 1 KiB..8 GiB, every harness
and release, networks, collectives, forced algorithms and protocols, refusals) against the
digests stored from the code before, and a few cases whole."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.nccl_grid import WITNESSES, digests, grid

STORED = json.loads((Path(__file__).parent / "data" / "nccl_golden.json").read_text())


def test_every_case_of_the_grid_is_the_stored_one() -> None:
    data = grid(full=False)
    now = digests(data)
    assert sorted(now) == sorted(STORED["digests"]), "the grid's cases changed"
    drifted = [k for k, d in now.items() if d != STORED["digests"][k]]
    assert not drifted, f"{len(drifted)} cases moved, e.g. {drifted[:5]}"
    flat = {f"{part}|{key}": value for part, cases in data.items()
            for key, value in cases.items()}
    for key in WITNESSES:   # the same numbers, shown where they differ
        assert json.loads(json.dumps(flat[key])) == STORED["witnesses"][key], key
