"""Every GPU-count and local-rank decision, for 0, 1, 2 and 8 GPUs and 1, 2 and 8 ranks (no GPU
needed: the decisions are pure functions of the counts)."""

from __future__ import annotations

import itertools

import pytest

from distlab.devices import ddp_placement, gpu_sharing_problem, nccl_problem, rank_gpu
from distlab.profile.collectives_part import CollectiveFacts, plan_runs
from distlab.profile.ddp_part import ddp_device

GPUS = (0, 1, 2, 8)
RANKS = (1, 2, 8)


@pytest.mark.parametrize("gpus, ranks", list(itertools.product(GPUS, RANKS)))
def test_a_rank_owns_a_gpu_only_when_every_rank_of_its_host_can(gpus: int, ranks: int) -> None:
    owned = [rank_gpu(gpus, ranks, r) for r in range(ranks)]
    if gpus == 0:
        assert owned == [None] * ranks and gpu_sharing_problem(gpus, ranks) == ""
    elif ranks <= gpus:
        assert owned == list(range(ranks)) and gpu_sharing_problem(gpus, ranks) == ""
    else:  # e.g. torchrun --nproc-per-node 2 on one GPU: nobody takes a GPU, one reason says why
        assert owned == [None] * ranks
        why = gpu_sharing_problem(gpus, ranks)
        assert f"{ranks} ranks on this host" in why and "NCCL refuses two ranks" in why


@pytest.mark.parametrize("gpus, ranks", list(itertools.product(GPUS, RANKS)))
def test_nccl_needs_two_ranks_each_with_its_own_gpu(gpus: int, ranks: int) -> None:
    why = nccl_problem(gpus, ranks, ranks)
    assert (why == "") == (2 <= ranks <= gpus)
    assert nccl_problem(gpus, ranks, ranks, nccl_built=False, torch_version="2.13.0+cpu") == \
        "torch 2.13.0+cpu is built without NCCL"


@pytest.mark.parametrize("gpus, ranks", list(itertools.product(GPUS, RANKS)))
def test_ddp_placement(gpus: int, ranks: int) -> None:
    cpu = ddp_placement("cpu", gpus, ranks)
    assert (cpu.backend, cpu.device, cpu.gpu_of_rank) == ("gloo", "cpu", (None,) * ranks)
    auto = ddp_placement("auto", gpus, ranks)
    if gpus == 0:
        assert auto == cpu
        with pytest.raises(ValueError, match="no CUDA device"):
            ddp_placement("cuda", gpus, ranks)
        return
    cuda = ddp_placement("cuda", gpus, ranks)
    assert auto == cuda and cuda.device == "cuda"
    if ranks <= gpus:
        assert cuda.backend == "nccl" and cuda.gpu_of_rank == tuple(range(ranks))
        assert "NCCL, one GPU per rank" in cuda.label
    else:  # one H100 and two ranks: gloo ranks share it with CUDA parameters, and say so
        assert cuda.backend == "gloo" and cuda.gpu_of_rank == tuple(r % gpus for r in range(ranks))
        assert "sharing" in cuda.label and "CUDA parameters" in cuda.label
    # short enough for the lines notebook 06 prints around it (a 1-GPU H100 box wrapped them)
    for label in (cpu.label, auto.label):
        assert len(label) <= 48, label
        assert len(f"ddp: 3 x Linear(256), batch 32, world {ranks} ({label}, one host)") <= 110


def test_bad_counts_and_devices_raise() -> None:
    for call in (lambda: rank_gpu(-1, 2, 0), lambda: rank_gpu(1, 0, 0), lambda: rank_gpu(1, 2, 2),
                 lambda: ddp_placement("tpu", 1, 2), lambda: nccl_problem(1, 0, 1)):
        with pytest.raises(ValueError):
            call()


@pytest.mark.parametrize("gpus, torchrun, world", [(g, t, w) for g in GPUS for t in (False, True)
                                                  for w in RANKS])
def test_profile_plan(gpus: int, torchrun: bool, world: int) -> None:
    facts = CollectiveFacts(gloo=True, nccl=True, gpus=gpus, torch_version="x", torchrun=torchrun,
                            world_size=world if torchrun else 1,
                            local_world_size=world if torchrun else 1)
    runs, skipped = plan_runs(facts, quick=True)
    gloo = [c for c in runs if c.backend == "gloo"]
    nccl = [c for c in runs if c.backend == "nccl"]
    assert [c.world_size for c in gloo] == ([world] if torchrun and world >= 2 else
                                            [] if torchrun else [2])
    nccl_ranks = world if torchrun else gpus
    want_nccl = 2 <= nccl_ranks <= gpus
    assert [c.world_size for c in nccl] == ([nccl_ranks] if want_nccl else [])
    whats = [s["what"] for s in skipped]
    assert ("collectives/nccl" in whats) == (not want_nccl)  # one line says why
    if gpus == 1 and not torchrun:  # the H100 box: no "nccl ws1" of zeros any more
        why = next(s["why"] for s in skipped if s["what"] == "collectives/nccl")
        assert "at least 2 ranks" in why
    device, why = ddp_device(gpus, torchrun, world if torchrun else 2)
    if gpus == 0:
        assert (device, why) == ("cpu", "")
    elif torchrun and world > gpus:
        assert device == "cpu" and "NCCL refuses two ranks" in why
    else:
        assert (device, why) == ("cuda", "")


@pytest.mark.parametrize("quick", [False, True])
def test_profile_plan_rounds_set_every_allreduce_sweeps_timed_rounds(quick: bool) -> None:
    facts = CollectiveFacts(gloo=True, nccl=True, gpus=4, torch_version="x", torchrun=False,
                            world_size=1, local_world_size=1)
    default, _ = plan_runs(facts, quick=quick)
    assert {c.iters for c in default} == {5 if quick else 20}
    more, _ = plan_runs(facts, quick=quick, rounds=80)
    assert {c.iters for c in more} == {80} and len(more) == len(default)
    assert [c.maxbytes for c in more] == [c.maxbytes for c in default]
    for bad in (0, -3):
        with pytest.raises(ValueError, match="rounds"):
            plan_runs(facts, quick=quick, rounds=bad)

