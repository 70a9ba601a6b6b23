"""Which GPU a rank uses and which GPU work a host can do: pure functions of the counts.

Every decision that depends on the number of GPUs or on a rank's place on its host is made here,
from plain numbers, so it is tested for 0, 1, 2 and 8 GPUs on machines without any (the callers
read the counts: ``torch.cuda.device_count()``, torchrun's ``LOCAL_RANK`` and
``LOCAL_WORLD_SIZE``). The rules:

- a rank owns a GPU only when every rank on its host can own one (``local_world_size <= gpus``):
  NCCL refuses two ranks on one GPU ("Duplicate GPU detected"), and copies timed by two ranks
  at once on one GPU measure the sharing, not the link;
- an allreduce needs two ranks, so NCCL needs two GPUs (two ranks, one GPU each);
- DDP on CUDA runs NCCL when every rank has its own GPU, else gloo ranks sharing the GPUs with
  CUDA parameters (torch's gloo allreduces CUDA tensors through host copies), labelled so.
"""

from __future__ import annotations

from dataclasses import dataclass

from distlab._checks import check_choice, check_int

__all__ = ["DDP_DEVICES", "DdpPlacement", "ddp_placement", "gpu_sharing_problem",
           "nccl_problem", "rank_gpu"]

DDP_DEVICES = ("auto", "cpu", "cuda")


def _counts(gpus: int, local_world_size: int) -> tuple[int, int]:
    return (check_int("gpus", gpus, minimum=0),
            check_int("local_world_size", local_world_size, minimum=1))


def gpu_sharing_problem(gpus: int, local_world_size: int) -> str:
    """Why the ranks of one host cannot each own a GPU ("" when they can, or there is none)."""
    gpus, local = _counts(gpus, local_world_size)
    if gpus == 0 or local <= gpus:
        return ""
    return (f"{local} ranks on this host but {gpus} GPU{'s' if gpus != 1 else ''}: each rank "
            "needs a GPU of its own (NCCL refuses two ranks on one GPU, and copies timed by "
            "several ranks on one GPU measure the sharing)")


def rank_gpu(gpus: int, local_world_size: int, local_rank: int) -> int | None:
    """The GPU index rank ``local_rank`` owns, or None (no GPU here, or too few to own one)."""
    gpus, local = _counts(gpus, local_world_size)
    local_rank = check_int("local_rank", local_rank, minimum=0, maximum=local - 1)
    if gpus == 0 or gpu_sharing_problem(gpus, local):
        return None
    return local_rank


def nccl_problem(gpus: int, world_size: int, local_world_size: int, *,
                 nccl_built: bool = True, torch_version: str = "") -> str:
    """Why an NCCL allreduce cannot run on these ranks ("" when it can)."""
    gpus, local = _counts(gpus, local_world_size)
    world_size = check_int("world_size", world_size, minimum=1)
    if not nccl_built:
        return f"torch {torch_version} is built without NCCL".replace("torch  ", "torch ")
    if gpus == 0:
        return "no CUDA device visible to torch"
    if world_size < 2:
        return (f"an allreduce needs at least 2 ranks and NCCL one GPU per rank; this machine "
                f"has {gpus} GPU" + ("s" if gpus != 1 else ""))
    return gpu_sharing_problem(gpus, local)


@dataclass(frozen=True)
class DdpPlacement:
    """Where a DDP run puts its ranks: backend, parameter device type, the GPU of each local
    rank (None for CPU), and the label every table shows (short: it stands inside a head
    line of at most 110 characters)."""

    backend: str
    device: str
    gpu_of_rank: tuple[int | None, ...]
    label: str


def ddp_placement(device: str, gpus: int, world_size: int) -> DdpPlacement:
    """The placement of ``world_size`` local DDP ranks for ``device`` (auto, cpu or cuda).

    ``auto`` is ``cuda`` when there is a GPU, else ``cpu``. ``cuda`` with a GPU per rank: NCCL,
    rank r on GPU r; with fewer GPUs than ranks: gloo ranks sharing them (rank r on GPU
    r mod gpus) with CUDA parameters. ``cuda`` without a GPU raises ``ValueError``.
    """
    device = check_choice("device", device, DDP_DEVICES)
    gpus = check_int("gpus", gpus, minimum=0)
    world_size = check_int("world_size", world_size, minimum=1)
    if device == "auto":
        device = "cuda" if gpus else "cpu"
    if device == "cpu":
        return DdpPlacement("gloo", "cpu", (None,) * world_size, "gloo, CPU parameters")
    if gpus == 0:
        raise ValueError("device='cuda' but torch sees no CUDA device; use device='cpu'")
    if world_size <= gpus:
        return DdpPlacement("nccl", "cuda", tuple(range(world_size)),
                            f"NCCL, one GPU per rank ({world_size} GPUs)")
    return DdpPlacement("gloo", "cuda", tuple(r % gpus for r in range(world_size)),
                        f"gloo, {world_size} ranks sharing {gpus} GPU{'s' if gpus != 1 else ''} "
                        "(CUDA parameters)")
