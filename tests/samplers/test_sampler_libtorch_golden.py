"""distlab's libtorch samplers replay the golden outputs of the compiled C++ ones (no compiler).

The golden file is written by ``tools/make_sampler_golden.py`` from the real C++ samplers.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from distlab.samplers import DistributedRandomSampler, DistributedSequentialSampler
from distlab.samplers.libstdcxx import shuffle
from distlab.samplers.mt19937 import MT19937

GOLDEN = Path(__file__).parent / "data" / "libtorch_samplers_golden.json"
CASES: list[dict[str, Any]] = json.loads(GOLDEN.read_text())["cases"]


def digest(values: Any) -> str:
    return hashlib.sha256(np.asarray(values, dtype="<i8").tobytes()).hexdigest()


def drain(sampler: Any, batch_size: int) -> list[list[int]]:
    out = []
    while (batch := sampler.next(batch_size)) is not None:
        out.append(batch)
    return out


def check(batches: list[list[int]], expected: dict[str, Any]) -> None:
    if "batches" in expected:
        assert batches == expected["batches"]
        return
    flat = [i for b in batches for i in b]
    assert len(flat) == expected["count"]
    assert len(batches) == expected["num_batches"]
    assert len(batches[-1]) == expected["last_batch"]
    assert digest(flat) == expected["sha256"]


def _ids(case: dict[str, Any]) -> str:
    keys = ("size", "num_replicas", "rank", "allow_duplicates", "seed")
    return case["kind"] + "-" + "-".join(str(case[k]) for k in keys if k in case)


def test_golden_file_covers_every_kind() -> None:
    kinds = {c["kind"] for c in CASES}
    assert kinds == {"random_epochs", "random_initial", "random_resets", "random_resume",
                     "sequential", "mt19937", "shuffle"}
    # both shuffle paths (two draws per call below 65536 elements, one above) are covered
    sizes = {c["size"] for c in CASES if c["kind"] == "shuffle"}
    assert min(sizes) == 0 and max(sizes) > 65_536


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_replays_golden_case(case: dict[str, Any]) -> None:
    kind, exp = case["kind"], case["expected"]
    if kind == "mt19937":
        raw = MT19937(case["seed"]).next_raw(case["count"]).astype(np.int64)
        assert raw[:5].tolist() == exp["head"]
        assert digest(raw) == exp["sha256"]
        return
    if kind == "shuffle":
        values = np.arange(case["size"], dtype=np.int64)
        shuffle(values, MT19937(case["seed"]))
        if "values" in exp:
            assert values.tolist() == exp["values"]
        else:
            assert digest(values) == exp["sha256"]
        return
    args = (case["size"], case["num_replicas"], case["rank"], case["allow_duplicates"])
    bs = case["batch_size"]
    if kind == "sequential":
        s = DistributedSequentialSampler(*args)
        got = drain(s, bs)
        s.reset(case["new_size"])
        check(got + [[]] + drain(s, bs), exp)
        return
    s = DistributedRandomSampler(*args)
    if kind == "random_initial":
        check(drain(s, bs), exp)
    elif kind == "random_epochs":
        for epoch, expected in zip(case["epochs"], exp, strict=True):
            s.set_epoch(epoch)
            s.reset()
            check(drain(s, bs), expected)
    elif kind == "random_resets":
        s.set_epoch(case["epoch"])
        for size, expected in zip(case["sizes"], exp, strict=True):
            s.reset(size)
            check(drain(s, bs), expected)
    elif kind == "random_resume":
        s.set_epoch(case["epoch"])
        s.reset()
        for _ in range(case["taken"]):
            s.next(bs)
        fresh = DistributedRandomSampler(*args)
        fresh.load_state_dict(s.state_dict())
        assert (fresh.index(), fresh.epoch()) == (exp["index"], exp["epoch"])
        check(drain(fresh, bs), exp)
    else:  # pragma: no cover - a new kind in the file
        raise AssertionError(f"unknown golden case kind {kind!r}")
