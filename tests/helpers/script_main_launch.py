"""A plain script whose rank function lives in its own __main__ (run by tests/test_launch.py)."""

import torch
import torch.distributed as dist

from distlab import launch


def rank_sum(rank: int, world_size: int) -> float:
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    return t.item()


if __name__ == "__main__":
    print("RESULT", launch.run(rank_sum, 3, timeout=60), flush=True)
