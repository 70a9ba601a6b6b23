"""Tensor parallelism inside pipeline stages (TP x PP) on 4 live gloo ranks.

Mesh ``("pp", "tp")`` = (2, 2): each pipeline stage is a 2-way tensor-parallel group (its MLP
blocks split by distlab's ``parallelize_module``, ``net1`` column-wise, ``net2`` row-wise) and
``PipelineStage`` gets the mesh's ``"pp"`` group, so pipeline rank ``i``'s TP rank ``t`` talks to
pipeline rank ``i + 1``'s TP rank ``t``. Under 1F1B and GPipe (two blocks per stage),
Interleaved 1F1B and ZB-V (four stages of one block, two per rank; ZB-V with its split ``I``/``W``
backward), and 1F1B on a ``("pp", "dp", "tp")`` = (2, 1, 2) mesh, two steps each with Adam
(``lr=1e-2``): every microbatch's loss (on both TP ranks of the last stage), every gradient and
every weight after each Adam step, all-gathered back to full shape over the TP group, equal a
one-process run of the whole model on the whole batch.

Tolerance: float32 rounding of sums in another order (a microbatch's sums and a TP rank's
partial matmul run over fewer terms than one process's, then add up), by
``helpers.float_tolerance``: sums of at most :data:`REDUCTION` terms, :data:`DEPTH` deep, so
``|a - b| <= 3.1e-5 max|b|`` per tensor (the losses of a step as one); the weights after Adam
at their own magnitude (Adam's step is ``lr`` times the gradient over its running RMS, so
last-bit gradient differences move it by ``lr`` times their relative size). The TP collectives
run once per microbatch (one all-reduce per block forward, one per block backward except the
first stage's first block, whose input needs no gradient), the split backward included: ``W``
repeats none.

Bad input ends before any rank starts (a mesh that does not hold the world, a hidden size the
TP degree does not divide) or, on the ranks, before any communication (a pipeline group that
shares ranks with the stage's TP group).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from distlab import launch
from distlab.tensor_parallel import check_mesh_shape, check_plan, mesh_groups
from helpers.float_tolerance import error_ratio
from helpers.leaks import no_leaks
from helpers.tp_pp_targets import (
    BLOCKS,
    MICROBATCHES,
    PP,
    SINGLE,
    STEPS,
    TP,
    check_config,
    full_model,
    plan,
    reference,
    tp_times_pp,
)

pytestmark = pytest.mark.timeout(180)

REDUCTION = 16
"""The longest sum: a block's hidden width (16), a microbatch's squared error (2 rows x 8), a
weight gradient's rows (8)."""
DEPTH = 2 * 2 * BLOCKS
"""Reductions in series: two linear layers per block, forward and backward."""


def _ratio(a: torch.Tensor | list[float], b: torch.Tensor | list[float]) -> float:
    return error_ratio(torch.as_tensor(a), torch.as_tensor(b), reduction_length=REDUCTION,
                       depth=DEPTH)

RUNS = [("1F1B", "pp,tp"), ("GPipe", "pp,tp"), ("Interleaved1F1B", "pp,tp"),
        ("ZBVZeroBubble", "pp,tp"), ("1F1B", "pp,dp,tp")]


def launch_tp_pp(world: int, runs: list[tuple[str, str]], pp_size: int = PP,
                 tp_size: int = TP, hidden: int | None = None) -> list[dict]:
    """Check the configuration here, then start the ranks."""
    check_config(world, pp_size, tp_size, *(() if hidden is None else (hidden,)))
    return launch.run(tp_times_pp, world, args=(runs,), timeout=120)


@pytest.fixture(scope="module")
def runs() -> list[dict]:
    with no_leaks():
        return launch_tp_pp(PP * TP, RUNS)


@pytest.fixture(scope="module")
def ref() -> list[dict]:
    return reference()


@pytest.mark.multiprocess
@pytest.mark.parametrize("schedule,mesh", RUNS, ids=[f"{s}-{m}" for s, m in RUNS])
def test_losses_gradients_and_adam_steps_equal_one_process(runs, ref, schedule, mesh):
    key = f"{schedule} {mesh}"
    for step, want in enumerate(ref):
        seen: set[str] = set()
        for rank, out in enumerate(runs):
            got = out[key]["steps"][step]
            for kind in ("grads", "params"):
                for name, t in got[kind].items():
                    assert _ratio(t, want[kind][name]) <= 1, (key, rank, step, kind, name)
            seen |= set(got["grads"])
            holds_last = (PP * (1 if schedule in SINGLE else 2) - 1) in out[key]["stages"]
            if holds_last:
                assert _ratio(got["losses"], want["losses"]) <= 1, (key, rank, step)
            else:
                assert got["losses"] is None
        assert seen == set(want["grads"]), key


@pytest.mark.multiprocess
def test_each_tp_rank_talks_to_the_same_tp_rank_of_the_next_stage(runs):
    for rank, out in enumerate(runs):
        stage, t = divmod(rank, TP)
        assert out["coordinate"] == (stage, t)
        for schedule, mesh in RUNS:
            r = out[f"{schedule} {mesh}"]
            assert r["pp_ranks"] == [t, TP + t] == list(mesh_groups((PP, TP), "pp",
                                                                    ("pp", "tp"))[t])
            assert r["tp_ranks"] == [TP * stage, TP * stage + 1]


@pytest.mark.multiprocess
@pytest.mark.parametrize("schedule,mesh", RUNS, ids=[f"{s}-{m}" for s, m in RUNS])
def test_tp_collectives_run_once_per_microbatch(runs, schedule, mesh):
    blocks = BLOCKS // (PP * (1 if schedule in SINGLE else 2))
    for out in runs:
        for stage, counts in out[f"{schedule} {mesh}"]["tp_counts"].items():
            per_microbatch = 2 * blocks - (1 if stage == 0 else 0)
            assert counts == {"all_reduce": STEPS * MICROBATCHES * per_microbatch}, stage


@pytest.mark.multiprocess
def test_a_pipeline_group_sharing_the_stage_tp_group_is_refused(runs):
    for rank, out in enumerate(runs):
        mine = [TP * (rank // TP), TP * (rank // TP) + 1]
        other = next(r for r in mine if r != rank)
        for name, pipe in (("tp group", mine), ("world", [0, 1, 2, 3])):
            msg = out["wrong_groups"][name]
            assert msg.startswith(f"stage 0's module is split over the tensor-parallel group of "
                                  f"ranks {mine}, and its pipeline group (group=) holds ranks "
                                  f"{pipe}: they share ranks [{other}] besides this rank "
                                  f"{rank}"), msg
            assert "group=mesh.get_group('pp')" in msg
        assert out["in_step"] == 4.0  # refused before any communication


def test_bad_configurations_are_refused_before_any_rank_starts(monkeypatch):
    def no_launch(*args, **kwargs):
        raise AssertionError("launch.run was called")

    monkeypatch.setattr(launch, "run", no_launch)
    with no_leaks():
        with pytest.raises(ValueError, match=r"shape \(2, 3\) holds pp \* tp = 2 \* 3 = 6 ranks; "
                                             r"it must hold the world size 4"):
            launch_tp_pp(4, RUNS, PP, 3)
        with pytest.raises(ValueError, match=r"shape \(2, 2\) holds pp \* tp = 2 \* 2 = 4 ranks; "
                                             r"it must hold the world size 8"):
            launch_tp_pp(8, RUNS)
        with pytest.raises(ValueError, match=r"parallelize_plan\['0.net1'\]: Linear.out_features "
                                             r"= 15 is not divisible by the tensor-parallel "
                                             r"size 2"):
            launch_tp_pp(4, RUNS, hidden=15)


def test_check_plan_changes_nothing_and_returns_the_entries():
    model = full_model()
    before = {n: p.shape for n, p in model.named_parameters()}
    entries = check_plan(model, plan(), TP)
    assert [path for path, _, _ in entries] == [f"{b}.net{k}" for k in (1, 2)
                                                for b in range(BLOCKS)]
    assert before == {n: p.shape for n, p in model.named_parameters()}
    assert not hasattr(model, "tp_comm")
    with pytest.raises(ValueError, match="names no submodule"):
        check_plan(model, {"*.net3": plan()["*.net1"]}, TP)
    with pytest.raises(ValueError, match=r"RowwiseParallel applies to nn.Linear, nn.Embedding; "
                                         r"submodule '0.relu' is ReLU"):
        check_plan(model, {"*.relu": plan()["*.net2"]}, TP)
    with pytest.raises(ValueError, match="tp_size must be an int >= 1"):
        check_plan(model, plan(), 0)
    with pytest.raises(TypeError, match="module must be an nn.Module"):
        check_plan([nn.Linear(2, 2)], plan(), TP)


def test_mesh_groups_in_pp_tp_and_pp_dp_tp_order():
    assert mesh_groups((2, 2), "pp", ("pp", "tp")) == [(0, 2), (1, 3)]
    assert mesh_groups((2, 2), "tp", ("pp", "tp")) == [(0, 1), (2, 3)]
    names = ("pp", "dp", "tp")
    assert mesh_groups((2, 2, 2), "tp", names) == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert mesh_groups((2, 2, 2), "dp", names) == [(0, 2), (1, 3), (4, 6), (5, 7)]
    assert mesh_groups((2, 2, 2), "pp", names) == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert mesh_groups((2, 1, 2), 0) == [(0, 2), (1, 3)]  # dp of one: the (pp, tp) layout
    assert check_mesh_shape(4) == ((4,), ("dim0",))
    assert check_mesh_shape([2, 1, 2], names, 4) == ((2, 1, 2), names)
    with pytest.raises(ValueError, match=r"holds pp \* dp \* tp = 2 \* 2 \* 2 = 8 ranks; it "
                                         r"must hold the world size 4"):
        check_mesh_shape((2, 2, 2), names, 4)
    with pytest.raises(ValueError, match=r"dim must be one of the mesh's dimension names "
                                         r"\['pp', 'tp'\]"):
        mesh_groups((2, 2), "dp", ("pp", "tp"))
    with pytest.raises(ValueError, match="dim_names must be 2 distinct names"):
        check_mesh_shape((2, 2), ("tp", "tp"))
    with pytest.raises(ValueError, match=r"shape\[1\] must be an int >= 1"):
        check_mesh_shape((2, 0))
