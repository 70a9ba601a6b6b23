"""Shard files on disk: generate them, and read batches of fixed-size records back.

A shard is a flat binary file of ``records_per_shard`` records of ``record_nbytes`` bytes each
(seeded random bytes). Pipeline item ``b`` is batch ``b``: records ``b*batch_size`` to
``(b+1)*batch_size - 1`` of the concatenation of all shards, wrapping around at the end. Every read
is a real ``os.pread`` (it releases the GIL), served by the page cache once the files are warm.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from distlab._checks import check_int

__all__ = ["ShardSet", "write_shards"]


def _positive_int(name: str, value: object, minimum: int = 1) -> int:
    return check_int(name, value, minimum=minimum)


def write_shards(directory: str | os.PathLike[str], *, n_shards: int = 4,
                 records_per_shard: int = 256, record_nbytes: int = 4096,
                 seed: int = 0) -> list[Path]:
    """Write ``n_shards`` files ``shard_00000.bin ...`` of seeded random records; returns paths.

    Args:
        directory: folder to create the files in (created if missing).
        n_shards: number of files, >= 1.
        records_per_shard: records per file, >= 1.
        record_nbytes: bytes per record, >= 1.
        seed: seed of the random bytes; same arguments give identical files.
    """
    _positive_int("n_shards", n_shards)
    _positive_int("records_per_shard", records_per_shard)
    _positive_int("record_nbytes", record_nbytes)
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    for k in range(n_shards):
        p = d / f"shard_{k:05d}.bin"
        p.write_bytes(rng.integers(0, 256, records_per_shard * record_nbytes,
                                   dtype=np.uint8).tobytes())
        paths.append(p)
    return paths


class ShardSet:
    """Fixed-size records spread over shard files; reads batches with ``os.pread``.

    Picklable (it holds paths, not open files), so worker processes can use it.

    Args:
        files: shard paths, all of the same size, a multiple of ``record_nbytes``.
        record_nbytes: bytes per record.
    """

    def __init__(self, files: Sequence[str | os.PathLike[str]], record_nbytes: int) -> None:
        if isinstance(files, (str, os.PathLike)) or not files:
            raise ValueError(f"files must be a non-empty sequence of paths, got {files!r}")
        _positive_int("record_nbytes", record_nbytes)
        self.files = [Path(f) for f in files]
        self.record_nbytes = record_nbytes
        sizes = {f.stat().st_size for f in self.files}
        if len(sizes) != 1 or next(iter(sizes)) % record_nbytes:
            raise ValueError(f"shard files must all have one size that is a multiple of "
                             f"record_nbytes={record_nbytes}; got sizes {sorted(sizes)}")
        self.records_per_shard = next(iter(sizes)) // record_nbytes
        if self.records_per_shard < 1:
            raise ValueError("shard files are empty")

    def __len__(self) -> int:
        """Total number of records."""
        return len(self.files) * self.records_per_shard

    def read_record(self, index: int) -> bytes:
        """Record ``index`` (wraps modulo ``len(self)``) as bytes."""
        index %= len(self)
        shard, rec = divmod(index, self.records_per_shard)
        fd = os.open(self.files[shard], os.O_RDONLY)
        try:
            return os.pread(fd, self.record_nbytes, rec * self.record_nbytes)
        finally:
            os.close(fd)

    def read_batch(self, batch: int, batch_size: int) -> list[bytes]:
        """The ``batch_size`` records of batch ``batch``; contiguous runs are one pread each."""
        out: list[bytes] = []
        start = batch * batch_size
        while len(out) < batch_size:
            index = (start + len(out)) % len(self)
            shard, rec = divmod(index, self.records_per_shard)
            count = min(batch_size - len(out), self.records_per_shard - rec)
            fd = os.open(self.files[shard], os.O_RDONLY)
            try:
                blob = os.pread(fd, count * self.record_nbytes, rec * self.record_nbytes)
            finally:
                os.close(fd)
            n = self.record_nbytes
            out.extend(blob[i * n:(i + 1) * n] for i in range(count))
        return out

    def read_shard(self, shard: int) -> bytes:
        """The whole of shard ``shard`` (one part, for the async part loader)."""
        return self.files[shard % len(self.files)].read_bytes()
