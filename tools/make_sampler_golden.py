"""Write the golden file of libtorch's C++ samplers, from the real samplers compiled here.

    .venv/bin/python tools/make_sampler_golden.py
    # -> tests/samplers/data/libtorch_samplers_golden.json

It compiles (or loads from the temp-folder cache) the extension in
``tests/helpers/libtorch_compiled.py``, runs the C++ ``DistributedRandomSampler``,
``DistributedSequentialSampler``, ``std::mt19937`` and ``std::shuffle`` on a fixed, seeded list of
parameter sets, and stores their outputs (large ones as a SHA-256 of the little-endian int64 array).
``tests/samplers/test_sampler_libtorch_golden.py`` replays every case against distlab, without a
compiler. Re-run it only when the case list changes; the output is deterministic.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the compiled reference is test-only code

from helpers.libtorch_compiled import load_reference  # noqa: E402

DEFAULT_OUT = ROOT / "tests" / "samplers" / "data" / "libtorch_samplers_golden.json"
LIST_LIMIT = 64  # longer outputs are stored as a digest


def digest(values: Any) -> str:
    """SHA-256 of the values as little-endian int64."""
    return hashlib.sha256(np.asarray(values, dtype="<i8").tobytes()).hexdigest()


def _pack(batches: list[list[int]]) -> dict[str, Any]:
    flat = [i for b in batches for i in b]
    if len(flat) <= LIST_LIMIT:
        return {"batches": batches}
    last = len(batches[-1]) if batches else 0
    return {"count": len(flat), "num_batches": len(batches), "last_batch": last,
            "sha256": digest(flat)}


def cases(ref: Any, rng: random.Random) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def size() -> int:
        return rng.choice([0, 1, 2, 3, 5, 7, 8, rng.randrange(40), rng.randrange(400),
                           rng.randrange(70_000), rng.choice([65_535, 65_536, 65_537, 131_072])])

    for _ in range(60):
        n, w = size(), rng.randint(1, 12)
        r, dup, bs = rng.randrange(w), rng.random() < 0.6, rng.randint(1, 9)
        epochs = [rng.randrange(6), rng.randrange(2**32), rng.randrange(2**64)]
        res = ref.random_epochs(n, w, r, dup, epochs, bs)
        out.append({"kind": "random_epochs", "size": n, "num_replicas": w, "rank": r,
                    "allow_duplicates": dup, "epochs": epochs, "batch_size": bs,
                    "expected": [_pack(b) for b in res]})
    for _ in range(15):
        n, w = size(), rng.randint(1, 12)
        r, dup, bs = rng.randrange(w), rng.random() < 0.6, rng.randint(1, 9)
        out.append({"kind": "random_initial", "size": n, "num_replicas": w, "rank": r,
                    "allow_duplicates": dup, "batch_size": bs,
                    "expected": _pack(ref.random_initial(n, w, r, dup, bs))})
    for _ in range(15):
        n, w = rng.randrange(60), rng.randint(1, 8)
        r, dup, bs, ep = rng.randrange(w), rng.random() < 0.6, rng.randint(1, 5), rng.randrange(9)
        sizes = [rng.randrange(60) for _ in range(3)]
        res = ref.random_resets(n, w, r, dup, ep, sizes, bs)
        out.append({"kind": "random_resets", "size": n, "num_replicas": w, "rank": r,
                    "allow_duplicates": dup, "epoch": ep, "sizes": sizes, "batch_size": bs,
                    "expected": [_pack(b) for b in res]})
    for _ in range(20):
        n, w = rng.randrange(80), rng.randint(1, 8)
        r, dup, bs, ep = rng.randrange(w), rng.random() < 0.6, rng.randint(1, 5), rng.randrange(9)
        taken = rng.randrange(6)
        index, epoch, rest = ref.random_resume(n, w, r, dup, ep, taken, bs)
        out.append({"kind": "random_resume", "size": n, "num_replicas": w, "rank": r,
                    "allow_duplicates": dup, "epoch": ep, "taken": taken, "batch_size": bs,
                    "expected": {"index": index, "epoch": epoch, **_pack(rest)}})
    for _ in range(30):
        n, w = rng.choice([0, 1, 2, 3, rng.randrange(50), rng.randrange(500)]), rng.randint(1, 12)
        r, dup, bs, n2 = rng.randrange(w), rng.random() < 0.6, rng.randint(1, 9), rng.randrange(50)
        out.append({"kind": "sequential", "size": n, "num_replicas": w, "rank": r,
                    "allow_duplicates": dup, "batch_size": bs, "new_size": n2,
                    "expected": _pack(ref.sequential_batches(n, w, r, dup, bs, n2))})
    for seed in [0, 1, 5489, 2**32 - 1, 2**32 + 5, rng.randrange(2**64)]:
        out.append({"kind": "mt19937", "seed": seed, "count": 2000,
                    "expected": {"sha256": digest(ref.mt19937_raw(seed, 2000)),
                                 "head": ref.mt19937_raw(seed, 5)}})
    for n in [0, 1, 2, 3, 4, 10, 11, 1000, 65_535, 65_536, 300_001]:
        seed = rng.randrange(2**32)
        res = ref.shuffle_iota(n, seed)
        out.append({"kind": "shuffle", "size": n, "seed": seed,
                    "expected": {"sha256": digest(res)} if n > LIST_LIMIT else {"values": res}})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    ref = load_reference()
    payload = {
        "about": "outputs of libtorch's C++ samplers, std::mt19937 and std::shuffle as compiled "
                 "into the torch wheel; written by tools/make_sampler_golden.py",
        "torch": torch.__version__,
        "cases": cases(ref, random.Random(20240611)),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, separators=(",", ":")) + "\n")
    print(f"wrote {len(payload['cases'])} cases to {args.out} "
          f"({args.out.stat().st_size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
