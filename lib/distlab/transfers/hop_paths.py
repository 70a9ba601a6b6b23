"""The hop between processes: which paths a batch can take from a worker to the trainer, and
whether each can run here (pure functions of plain facts, tested for 0, 1, 2 and 8 GPUs).

A *hop* moves ``nbytes`` bytes that a worker process holds in its own memory to the trainer
process, timed from the worker's hand-over (its ``put``, or its first write into a shared slot)
to the moment the trainer can read every byte (every page of the received buffer touched, or the
device synchronized). The paths:

- ``hop_shm_fd``: a ``torch.multiprocessing`` queue. The tensor's storage is moved into a new
  shared-memory segment (``share_memory_``: create the segment, copy the bytes) and only a handle
  crosses: with the ``file_descriptor`` strategy the segment's file descriptor, passed over a Unix
  socket to the trainer (``multiprocessing.resource_sharer``);
- ``hop_shm_fs``: the same with the ``file_system`` strategy: the segment is a named file in
  ``/dev/shm`` (``torch_<pid>_...``), its name crosses, and ``torch_shm_manager`` tracks it;
- ``hop_pickle``: a multiprocessing queue carrying the bytes themselves (the tensor as a NumPy
  array, which torch's reducers leave alone): pickled, written through a pipe, read, unpickled.
  Once ``torch`` is imported *every* multiprocessing queue moves tensors by shared memory (torch
  registers its reducers with ``multiprocessing.reduction.ForkingPickler`` on import), so this is
  what a queue costs without them;
- ``hop_ring``: a ring of slots shared once, before any batch: the worker writes the batch into a
  free slot in place and only the slot's index crosses (what DataLoader's collate does when it
  stacks a batch straight into shared memory, and what a ring of pinned/shared slots costs);
- ``hop_cuda_ipc``: a CUDA tensor by IPC handle (``cudaIpcGetMemHandle`` in the worker,
  ``cudaIpcOpenMemHandle`` in the trainer) on one GPU: no byte is copied; skipped with the reason
  where there is no GPU.

Units: bytes, seconds.
"""

from __future__ import annotations

import sys

from distlab._checks import check_choice, check_int, check_str
from distlab.devices import gpu_sharing_problem, rank_gpu

__all__ = ["HOP_KINDS", "HOP_PATHS", "HOP_STRATEGY", "cuda_ipc_device", "cuda_ipc_problem",
           "hop_unavailable", "strategy_problem"]

HOP_PATHS: dict[str, str] = {
    "hop_shm_fd": "torch.multiprocessing queue, storage moved to shared memory, its file "
                  "descriptor sent (file_descriptor strategy)",
    "hop_shm_fs": "torch.multiprocessing queue, storage moved to a named /dev/shm file, its "
                  "name sent (file_system strategy, torch_shm_manager)",
    "hop_pickle": "multiprocessing queue, the bytes pickled through a pipe (no torch reducer)",
    "hop_ring": "ring of slots shared once: the worker writes in place, the slot index is sent",
    "hop_cuda_ipc": "CUDA tensor by IPC handle on one GPU (no copy)",
}
#: the sharing strategy each shared-memory path uses (``hop_ring``'s slots are shared once, at
#: set-up, with the process's default strategy; ``hop_pickle`` shares nothing)
HOP_STRATEGY = {"hop_shm_fd": "file_descriptor", "hop_shm_fs": "file_system"}
#: (path, memory) rows, in table order; ``memory`` is where the worker's bytes start
HOP_KINDS: list[tuple[str, str]] = [(p, "device" if p == "hop_cuda_ipc" else "pageable")
                                    for p in HOP_PATHS]


def strategy_problem(strategy: str, available: frozenset[str] | set[str]) -> str:
    """Why sharing ``strategy`` cannot be used ("" when it can), given the strategies this torch
    offers (``torch.multiprocessing.get_all_sharing_strategies()``: macOS has only
    ``file_system``)."""
    strategy = check_str("strategy", strategy, nonempty=True)
    if strategy in available:
        return ""
    return (f"torch.multiprocessing has no {strategy!r} sharing strategy on this platform "
            f"(available: {', '.join(sorted(available)) or 'none'})")


def cuda_ipc_problem(gpus: int, local_world_size: int = 1, local_rank: int = 0, *,
                     platform: str = "linux", exclusive_process: bool = False) -> str:
    """Why a CUDA tensor cannot cross between this rank's processes by IPC handle ("" when it
    can): no GPU, a platform where torch has no CUDA IPC (only Linux has it), more ranks on the
    host than GPUs (no GPU of its own, :func:`distlab.devices.rank_gpu`), or a GPU in
    ``EXCLUSIVE_PROCESS`` compute mode (one process per GPU, so the trainer cannot open the
    worker's memory)."""
    local_rank = check_int("local_rank", local_rank, minimum=0)
    platform = check_str("platform", platform, nonempty=True)
    if check_int("gpus", gpus, minimum=0) == 0:
        return "no CUDA device visible to torch"
    if not platform.startswith("linux"):
        return f"torch shares CUDA tensors between processes only on Linux (this is {platform})"
    sharing = gpu_sharing_problem(gpus, local_world_size)
    if sharing:
        return sharing
    if exclusive_process:
        return ("the GPU is in EXCLUSIVE_PROCESS compute mode: only one process may use it, so "
                "the trainer cannot open the worker's memory")
    return ""


def cuda_ipc_device(gpus: int, local_world_size: int = 1, local_rank: int = 0) -> int | None:
    """The GPU the worker and the trainer of this rank share for ``hop_cuda_ipc`` (both must
    use the same device): the rank's own GPU, or None when it has none."""
    return rank_gpu(gpus, local_world_size, local_rank)


def hop_unavailable(path: str, *, gpus: int, strategies: frozenset[str] | set[str],
                    local_world_size: int = 1, local_rank: int = 0,
                    platform: str = sys.platform, exclusive_process: bool = False
                    ) -> str | None:
    """``None`` if hop ``path`` can be measured here, else the reason (pure: the caller passes
    the GPU count, the sharing strategies torch offers, the platform)."""
    check_choice("path", path, list(HOP_PATHS))
    if path == "hop_cuda_ipc":
        why = cuda_ipc_problem(gpus, local_world_size, local_rank, platform=platform,
                               exclusive_process=exclusive_process)
        return why or None
    if path not in HOP_STRATEGY:
        return None
    return strategy_problem(HOP_STRATEGY[path], strategies) or None
