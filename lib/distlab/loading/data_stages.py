"""Stages that turn shard files into a batch tensor: read, decode, collate (worker placement)."""

from __future__ import annotations

import time
from typing import Any

import torch

from distlab._checks import check_instance, check_int
from distlab.loading.cpuwork import burn
from distlab.loading.shards import ShardSet
from distlab.loading.stage import Stage
from distlab.loading.stage import stage_cost as _cost

__all__ = ["CollateStage", "DecodeStage", "ReadStage"]


class ReadStage(Stage):
    """Reads batch ``item`` (an int) of ``batch_size`` records from shard files; optional
    ``latency_s`` sleep per batch mimics remote storage. Output: a list of bytes records."""

    category = "io"

    def __init__(self, shards: ShardSet, batch_size: int = 8, latency_s: float = 0.0,
                 name: str = "read") -> None:
        check_instance("shards", shards, ShardSet)
        batch_size = check_int("batch_size", batch_size, minimum=1)
        self.shards, self.batch_size, self.name = shards, batch_size, name
        self.latency_s = _cost("latency_s", latency_s)
        self.cost_s = None if self.latency_s == 0 else self.latency_s

    def process(self, item: Any) -> Any:
        if self.latency_s:
            time.sleep(self.latency_s)
        return self.shards.read_batch(int(item), self.batch_size)


class DecodeStage(Stage):
    """Decodes each bytes record into a float32 tensor in [0, 1], then burns ``cost_s`` of extra
    CPU (standing for image decoding / augmentation). Output: a list of 1-D tensors."""

    category = "cpu"

    def __init__(self, cost_s: float = 0.0, name: str = "decode") -> None:
        self.cost_s = _cost("cost_s", cost_s)
        self.name = name

    def process(self, item: Any) -> Any:
        out = [torch.frombuffer(bytearray(rec), dtype=torch.uint8).float().div_(255.0)
               for rec in item]
        burn(self.cost_s)
        return out


class CollateStage(Stage):
    """Stacks a list of equal-shape tensors into one batch tensor."""

    category = "cpu"

    def __init__(self, name: str = "collate") -> None:
        self.name = name

    def process(self, item: Any) -> Any:
        return torch.stack(list(item)) if isinstance(item, (list, tuple)) else item
