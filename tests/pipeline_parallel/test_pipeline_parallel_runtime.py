"""distlab.pipeline_parallel.runtime on live gloo ranks: every schedule's losses and gradients
equal a one-process run of the same model on the whole batch and torch.distributed.pipelining's
own schedule on the same stages; pipeline x data parallel with distlab's DDP and with
ZeroDataParallel (ZeRO 1-3); timelines, peak activation bytes; bad input and failing ranks end
within a bound with the cause named.

Tolerance against the one-process run: float32 rounding of sums in another order (a
microbatch's sums run over fewer rows than the whole batch's, then add up), by
``helpers.float_tolerance``: sums of at most :data:`REDUCTION` terms, :data:`DEPTH` deep, so
``|a - b| <= 4.6e-5 max|b|``; the losses as one tensor per step. Against torch's schedule, and
``I`` + ``W`` against ``B``, the gradients run the same kernels on the same microbatches (torch
divides ``.grad`` by 4 after the backward, distlab seeds the loss with 1/4, both exact for a
power of two): bitwise equal by construction on any machine, checked with ``rtol=1e-6,
atol=1e-7`` (:data:`SAME_KERNELS`). Pipeline x ZeRO: parameters after each Adam step against one
process's with the same bound at their own magnitude (Adam's step is ``lr`` times a ratio of the
gradient to its running RMS, so last-bit gradient differences move it by ``lr`` times their
relative size).
"""

from __future__ import annotations

import re
import time

import pytest
import torch

from distlab import launch
from distlab.pipeline_parallel.runtime import (
    PipelineStage,
    PlanSchedule,
    ScheduleGPipe,
    get_schedule_class,
    merge_outputs,
    split_batch,
    split_target,
)
from distlab.pipeline_parallel.runtime.backward import (
    backward_full,
    backward_input,
    backward_weight,
)
from distlab.pipeline_parallel.schedules.registry import SCHEDULES, build_plan
from distlab.timeline import Timeline
from helpers.float_tolerance import error_ratio
from helpers.leaks import no_leaks
from helpers.pipeline_parallel_targets import (
    MICROBATCHES,
    SINGLE,
    bad_input_shape,
    batches,
    dp_times_pp,
    every_schedule,
    full_model,
    loss_fn,
    misuse,
    odd_shapes,
    reference,
    stage_fails,
    stage_fails_caught,
    stage_module,
    tuple_model,
    zero_reference,
    zero_times_pp,
)

REDUCTION = 48
"""The longest sum: a microbatch's mean squared error over 3 rows x 16 outputs (the uneven
batch of 10); a linear layer sums 16 inputs, a weight gradient 16 rows at most."""
DEPTH = 8
"""Reductions in series: up to 4 linear layers forward and 4 backward."""
SAME_KERNELS = {"rtol": 1e-6, "atol": 1e-7}   # the same kernels on the same operands


def _close(a: torch.Tensor | list[float], b: torch.Tensor | list[float]) -> bool:
    """``a`` and ``b`` (tensors, or lists of losses) agree to the rounding of the sums."""
    a, b = torch.as_tensor(a), torch.as_tensor(b)
    return error_ratio(a, b, reduction_length=REDUCTION, depth=DEPTH) <= 1


def _merged(ranks: list[dict], key: str, step: int) -> dict:
    grads: dict = {}
    for r in ranks:
        grads.update(r["steps"][step][key])
    return grads


def _check_against_reference(per_rank: list[dict], ref: list[dict], what: str) -> None:
    for step, want in enumerate(ref):
        grads = _merged(per_rank, "grads", step)
        assert set(grads) == set(want["grads"]), (what, step)
        for name, g in want["grads"].items():
            assert _close(grads[name], g), (what, step, name, (grads[name] - g).abs().max())
        last = [r for r in per_rank if r["steps"][step]["losses"] is not None]
        assert len(last) == 1, what
        got = last[0]["steps"][step]["losses"]
        assert _close(got, want["losses"]), (what, step, got, want["losses"])


@pytest.fixture(scope="module")
def two_ranks() -> list[dict]:
    """Every schedule on 2 ranks (GPipe and 1F1B one stage per rank, the others two), two
    steps each, distlab's and torch's, in one launch."""
    with no_leaks():
        return launch.run(every_schedule, 2, args=(list(SCHEDULES), list(SCHEDULES)),
                          timeout=300)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_losses_and_gradients_equal_one_process_and_torch(two_ranks, schedule):
    ref = reference(2 if schedule in SINGLE else 4)
    runs = [r[schedule] for r in two_ranks]
    _check_against_reference([r["ours"] for r in runs], ref, schedule)
    _check_against_reference([r["torch"] for r in runs], ref, "torch " + schedule)
    for step in range(len(ref)):
        ours, theirs = (_merged([r[w] for r in runs], "grads", step) for w in ("ours", "torch"))
        for name in ours:
            torch.testing.assert_close(ours[name], theirs[name], **SAME_KERNELS,
                                       msg=f"{schedule} step {step} {name}")
    last = next(r["ours"] for r in runs if r["ours"]["steps"][0]["output"] is not None)
    for step, want in enumerate(ref):
        assert _close(last["steps"][step]["output"], want["output"])


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_timeline_holds_every_action_and_the_stats_add_up(two_ranks, schedule):
    plan = build_plan(schedule, 2, MICROBATCHES, 1 if schedule in SINGLE else 2)
    for rank, r in enumerate(two_ranks):
        ours = r[schedule]["ours"]
        assert ours["stages"] == list(plan.stages_of(rank))
        spans = ours["spans"]  # the timeline holds both steps
        compute = [s for s in spans if s["lane"] == f"rank{rank}/compute"]
        assert sorted(s["name"] for s in compute) == sorted(
            2 * [str(a) for a in plan.compute(rank)])
        for s in compute:
            assert set(s["args"]) == {"stage", "microbatch", "kind"}
            assert s["name"] == f"{s['args']['stage']}{s['args']['kind']}" \
                                f"{s['args']['microbatch']}"
        p2p = [s for s in spans if s["lane"] == f"rank{rank}/p2p"]
        assert all(s["category"] in ("p2p_wait", "p2p_send") and s["args"]["nbytes"] > 0
                   for s in p2p)
        moves = [str(a) for a in plan.rank_actions(rank) if not a.kind.is_compute]
        assert sorted(s["name"] for s in p2p if not s["name"].startswith("wait ")) == sorted(
            2 * moves)
        assert len([s for s in spans if s["lane"] == f"rank{rank}/step"]) == 2
        stats = ours["steps"][1]["stats"]
        assert stats["compute_actions"] == len(plan.compute(rank))
        assert 0 < stats["compute_seconds"] <= stats["step_seconds"]
        assert 0 <= stats["bubble_fraction"] < 1
        assert stats["peak_activation_nbytes"] > 0


def test_peak_activations_follow_the_microbatches_in_flight(two_ranks):
    """GPipe keeps all 4 microbatches in flight on both ranks; 1F1B at most 2 on rank 0 (its
    warm-up) and 1 on the last rank. Each microbatch in flight holds, on rank 0, its slice of
    the user's batch (the Linear's input: the slice counts, not the whole batch) and the ReLU's
    output; on rank 1 the received input, the ReLU's output and its slice of the target (the
    MSE loss keeps it): 16 float32 per row each, 2 rows per microbatch. The peak is exactly
    the microbatches in flight times that."""
    gpipe = [r["GPipe"]["ours"]["steps"][1]["stats"] for r in two_ranks]
    ofob = [r["1F1B"]["ours"]["steps"][1]["stats"] for r in two_ranks]
    assert [s["peak_in_flight"] for s in gpipe] == [4, 4]
    assert [s["peak_in_flight"] for s in ofob] == [2, 1]
    tensor = 2 * 16 * 4  # one microbatch's 2 x 16 float32, bytes
    for rank, per_microbatch in ((0, 2 * tensor), (1, 3 * tensor)):
        for stats in (gpipe[rank], ofob[rank]):
            assert stats["peak_activation_nbytes"] == stats["peak_in_flight"] * per_microbatch



DP_RUNS = [("1F1B", "distlab"), ("ZBVZeroBubble", "distlab"), ("1F1B", "torch")]


def test_pipeline_times_data_parallel_with_ddp():
    """4 ranks = 2 pipeline stages x 2 replicas, each stage in a DDP on its replica group:
    the gradients equal one process on the concatenated batch. distlab's DDP under 1F1B and
    ZB-V (whose ``W`` must reach DDP's gradient hooks, two stages per rank), torch's under
    1F1B. Each stage's gradients are reduced once per step (after its last backward)."""
    with no_leaks():
        out = launch.run(dp_times_pp, 4, args=(DP_RUNS,), timeout=300)
    for schedule, ddp in DP_RUNS:
        ref = reference(2 if schedule in SINGLE else 4, replicas=2)
        for replica in (0, 1):
            runs = [out[2 * replica + p][f"{schedule} {ddp}"] for p in (0, 1)]
            if ddp == "distlab":  # one bucket per stage, reduced once per step, not per microbatch
                assert all(set(r["allreduces"].values()) == {len(ref)} for r in runs)
            for step, want in enumerate(ref):
                grads = _merged(runs, "grads", step)
                assert set(grads) == set(want["grads"])
                for name, g in want["grads"].items():
                    assert _close(grads[name], g), (schedule, ddp, replica, step, name)
                got = next(r["steps"][step]["losses"] for r in runs
                           if r["steps"][step]["losses"] is not None)
                half = len(want["losses"]) // 2
                assert _close(got, want["losses"][replica * half:(replica + 1) * half])


ZERO_RUNS = [(schedule, zero) for schedule in ("1F1B", "ZBVZeroBubble") for zero in (1, 2, 3)]


def test_pipeline_times_data_parallel_with_zero():
    """4 ranks = 2 pipeline stages x 2 replicas, each stage module in a ZeroDataParallel of ZeRO
    stage 1, 2 or 3 on its replica group (the wrapper given to PipelineStage as it is), under
    1F1B and ZB-V (split backward, two stages per rank: two ZeroDataParallel per rank), 2 Adam
    steps (lr 1e-2): after each step every parameter, gathered with ``full_state_dict``, equals
    one process trained with Adam on the concatenated batch (the module doc), and each
    replica's microbatch losses equal the reference's. Each stage's gradients are summed over
    its 4 microbatches and reduced once per step: one collective per step per stage (a stage is
    one bucket at stages 1-2, one unit at stage 3), not one per microbatch."""
    with no_leaks():
        out = launch.run(zero_times_pp, 4, args=(ZERO_RUNS,), timeout=180)
    for schedule, zero in ZERO_RUNS:
        key = f"{schedule} ZeRO-{zero}"
        ref = zero_reference(2 if schedule in SINGLE else 4)
        for replica in (0, 1):
            runs = [out[2 * replica + p][key] for p in (0, 1)]
            assert [set(r["reductions"].values()) for r in runs] == [{len(ref)}] * 2, (
                key, [r["reductions"] for r in runs])
            for step, want in enumerate(ref):
                params = _merged(runs, "params", step)
                assert set(params) == set(want["params"]), (key, step)
                for name, p in want["params"].items():
                    assert _close(params[name], p), (key, replica, step, name)
                got = [r["steps"][step]["losses"] for r in runs
                       if r["steps"][step]["losses"] is not None]
                half = len(want["losses"]) // 2
                assert len(got) == 1 and _close(
                    got[0], want["losses"][replica * half:(replica + 1) * half]), (
                    key, replica, step)


def test_tuple_boundaries_and_uneven_microbatches():
    """A boundary carrying (float, int64) sends a gradient for the float only; a batch of 10
    runs as microbatches of 3, 3, 2, 2 (torch.tensor_split) whose shapes cross once each, and
    the gradient is the mean over microbatches of each one's mean loss, as torch scales it;
    ``eval()`` gives the one-process outputs and losses."""
    with no_leaks():
        out = launch.run(odd_shapes, 2, timeout=120)
    _check_against_reference([{"steps": r["tuple"]} for r in out],
                             reference(2, model=tuple_model()), "tuple")
    model = full_model(2)
    for step, (x, y) in enumerate(batches(batch=10)):
        model.zero_grad(set_to_none=True)
        losses = []
        for xm, ym in zip(x.tensor_split(4), y.tensor_split(4), strict=True):
            loss = loss_fn(model(xm), ym)
            (loss / 4).backward()
            losses.append(float(loss.detach()))
        grads = {**out[0]["uneven"][step]["grads"], **out[1]["uneven"][step]["grads"]}
        for name, p in model.named_parameters():
            assert _close(grads[name], p.grad), (step, name)
        assert _close(out[1]["uneven"][step]["losses"], losses)
    x, y = batches(1, batch=10)[0]  # eval: the forwards only, outputs and losses as one process
    with torch.no_grad():
        pred = model(x)
    assert out[0]["eval"]["output"] is None and _close(out[1]["eval"]["output"], pred)
    assert _close(out[1]["eval"]["losses"],
                  [float(loss_fn(p, t)) for p, t in zip(pred.tensor_split(4), y.tensor_split(4),
                                                        strict=True)])


# ---- one process --------------------------------------------------------------------------

def test_one_rank_pipeline_needs_no_process_group():
    model = full_model(1)
    ref = full_model(1)
    x, y = batches(1)[0]
    loss_fn(ref(x), y).backward()
    tl = Timeline()
    sched = ScheduleGPipe(PipelineStage(model, 0, 1, "cpu"), 4, loss_fn=loss_fn, timeline=tl)
    losses: list = []
    out = sched.step(x, target=y, losses=losses)
    assert out.shape == (8, 16) and len(losses) == 4
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        assert _close(p.grad, q.grad)
    assert sched.last_step_stats.p2p_wait_seconds == 0
    assert sched.eval(x).shape == (8, 16)


def test_a_stage_module_that_is_neither_a_module_nor_a_wrapper_is_refused():
    with pytest.raises(TypeError, match="submodule must be a torch.nn.Module .*ZeroDataParallel"
                                        "\\), got function"):
        PipelineStage(loss_fn, 0, 1, "cpu")


def test_plan_schedule_runs_a_hand_made_plan():
    plan = build_plan("1F1B", 1, 2)
    model, ref = full_model(1), full_model(1)
    x, y = batches(1)[0]
    loss_fn(ref(x), y).backward()
    PlanSchedule(PipelineStage(model, 0, 1, "cpu"), plan, loss_fn=loss_fn).step(x, target=y)
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        assert _close(p.grad, q.grad)


def test_split_and_merge_follow_torch_tensor_split():
    x = torch.arange(10.0).reshape(10, 1)
    args, kwargs = split_batch((x, 3), {"mask": x > 4}, 4)
    assert [a[0].shape[0] for a in args] == [3, 3, 2, 2]
    assert [a[1] for a in args] == [3, 3, 3, 3]
    assert torch.equal(kwargs[3]["mask"], (x > 4)[8:])
    assert torch.equal(merge_outputs([a[0] for a in args]), x)
    assert split_target(None, 4) is None
    with pytest.raises(ValueError, match=r"args\[0\] has batch size 3 .* n_microbatches=4"):
        split_batch((torch.zeros(3, 2),), None, 4)
    with pytest.raises(ValueError, match="0-dim"):
        split_batch((torch.tensor(1.0),), None, 2)


def test_a_batch_that_cannot_be_split_is_refused_before_any_action():
    sched = ScheduleGPipe(PipelineStage(full_model(1), 0, 1, "cpu"), 4, loss_fn=loss_fn)
    with pytest.raises(ValueError, match="batch size 3 .*n_microbatches=4"):
        sched.step(torch.zeros(3, 16), target=torch.zeros(3, 16))
    with pytest.raises(ValueError, match="target=None on the rank of the last stage"):
        sched.step(torch.zeros(8, 16))


def test_unknown_schedule_names_the_allowed_ones():
    with pytest.raises(ValueError, match="allowed.*GPipe.*1F1B.*DualPipeV"):
        get_schedule_class("GPipeline")
    assert get_schedule_class("schedulezbvzerobubble").__name__ == "ScheduleZBVZeroBubble"
    assert get_schedule_class("1f1b").__name__ == "Schedule1F1B"


def test_split_backward_is_bitwise_the_full_backward():
    """I then W give the gradients B gives, bit for bit, also where a weight is shared
    between layers (W then runs the backward from the roots again)."""

    class Tied(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x):
            return self.lin(torch.relu(self.lin(x))), 2 * x

    torch.manual_seed(0)
    for model, width, recomputes in ((stage_module(full_model(3), 0, 3), 16, False),
                                     (Tied(), 8, True)):
        x0 = torch.randn(4, width)
        got = []
        for split in (False, True):
            model.zero_grad(set_to_none=True)
            gen = torch.Generator().manual_seed(3)
            x = x0.clone().requires_grad_(True)
            outs = model(x)
            outs = outs if isinstance(outs, tuple) else (outs,)
            seeds = [torch.randn(o.shape, generator=gen) for o in outs]
            if split:
                gx, job = backward_input(outs, seeds, (x,))
                assert all(p.grad is None for p in model.parameters())
                assert job.recomputes is recomputes
                backward_weight(job, list(model.parameters()))
            else:
                gx = backward_full(outs, seeds, (x,))
            got.append((gx[0].clone(), [p.grad.clone() for p in model.parameters()]))
        (a, ga), (b, gb) = got
        torch.testing.assert_close(a, b, **SAME_KERNELS)
        for p, q in zip(ga, gb, strict=True):
            torch.testing.assert_close(p, q, **SAME_KERNELS)


# ---- bad input and failing ranks -----------------------------------------------------------

def test_misuse_is_refused_with_the_argument_named():
    with no_leaks():
        out = launch.run(misuse, 2, timeout=120)
    e = out[0]
    assert e["too few microbatches"].startswith(
        "ValueError: microbatches=3 is not allowed for DualPipeV")
    assert e["wrong stages for the plan"] == (
        "ValueError: pipeline rank 0 holds stages [0, 2], but ZBVZeroBubble (v style, 2 ranks) "
        "puts stages [0, 3] on it")
    assert e["num_stages disagrees"].startswith("ValueError: stage 0 says num_stages=3")
    assert e["a list to a single-stage schedule"].startswith(
        "TypeError: ScheduleGPipe takes one PipelineStage")


def test_stage_output_and_next_input_shapes_disagree_is_named():
    t0 = time.monotonic()
    with no_leaks(), pytest.raises(launch.RankError) as info:
        launch.run(bad_input_shape, 2, timeout=60)
    assert info.value.rank == 1
    assert ("ValueError: stage 0 outputs (2, 16) float32 for microbatch 0, but stage 1's "
            "input_args expect (2, 8) float32") in str(info.value)
    assert time.monotonic() - t0 < 30


@pytest.mark.parametrize("schedule", ["1F1B", "ZBVZeroBubble"])
def test_a_stage_that_raises_stops_every_rank_and_its_traceback_surfaces(schedule):
    """Rank 1's error surfaces, and rank 0 is stopped rather than waited for: waiting would
    take at least rank 0's p2p timeout (a timeout never fires early), so the whole launch,
    spawning included, stays under it. The timeout is 300 s because spawning is in the clock:
    under 4 spinning processes two ranks took 65 s to start and fail."""
    p2p_timeout = 300.0
    t0 = time.monotonic()
    with no_leaks(), pytest.raises(launch.RankError) as info:
        launch.run(stage_fails, 2, args=(schedule, "raise", p2p_timeout), timeout=400)
    assert info.value.rank == 1
    assert "stage 1 failed on purpose" in info.value.traceback_text
    assert time.monotonic() - t0 < p2p_timeout


def test_a_rank_whose_peer_failed_stops_by_itself():
    """No launcher kills rank 0 here: rank 1 returns after its stage raised, its connections
    close, and rank 0's pending receive raises at once (not after the 30 s timeout): its
    error is of kind "peer", and it came before that timeout could have fired (a timeout never
    fires early; a correct run misses this bound only if starved for the whole 30 s). Which
    of rank 0's operations meets the closed connection depends on how far it got: usually the
    wait of its receive of microbatch 2's gradient, on a busy machine the post of a later
    send or receive (CI once saw rank 1 gone before rank 0 posted it)."""
    p2p_timeout = 30.0
    with no_leaks():
        out = launch.run(stage_fails_caught, 2, args=(p2p_timeout,), timeout=60)
    assert out[1]["error"].startswith("RuntimeError: stage 1 failed on purpose")
    assert out[0]["kind"] == "peer", out[0]
    assert out[0]["error"].startswith("PipelineCommError: rank 0: pipeline "), out[0]
    assert re.search(r"(from|to) pipeline rank 1 failed after ", out[0]["error"]), out[0]
    assert "the peer rank failed or exited" in out[0]["error"]
    assert out[0]["seconds"] < p2p_timeout


def test_a_stage_that_hangs_is_reported_within_the_timeout():
    """Rank 1 hangs in its third forward, so rank 0's wait for microbatch 2's gradient times
    out after 5 s, naming the operation and its peer. On a machine whose cores are always busy
    a rank can also be descheduled past the timeout before the hang (CI's run: rank 0 was late
    with an earlier send and rank 1's receive timed out first), so the error may come from
    either rank: what must hold is that the hang ends as one rank's named timeout with the
    other, never as a hang, and well within the launch's 60 s."""
    t0 = time.monotonic()
    with no_leaks(), pytest.raises(launch.RankError) as info:
        launch.run(stage_fails, 2, args=("1F1B", "hang", 5.0), timeout=60)
    me = info.value.rank
    assert me in (0, 1)
    text = str(info.value)
    assert re.search(rf"PipelineCommError: rank {me}: pipeline \d+(RECV|SEND)_[FB]\d+ "
                     rf"(from|to) pipeline rank {1 - me}( \(shapes\))? did not complete within "
                     r"5 s", text), text
    assert time.monotonic() - t0 < 60


def test_a_post_refused_by_a_closed_peer_is_a_named_peer_failure(monkeypatch):
    """gloo refuses to post a send or receive on a connection the peer already closed: that
    raises at the post, before any wait, and is the same named "peer" failure as a failed
    wait (not a bare backend RuntimeError)."""
    from distlab.pipeline_parallel.runtime import p2p

    def refused(*args, **kwargs):
        raise RuntimeError("[../gloo/transport/tcp/pair.cc:534] Connection closed by peer "
                           "[127.0.0.1]:4242")

    monkeypatch.setattr(p2p.dist, "isend", refused)
    monkeypatch.setattr(p2p.dist, "irecv", refused)
    monkeypatch.setattr(p2p, "PEER_GRACE_S", 0.0)
    channel = p2p.Channel(None, [0, 1], 30.0)
    for post, what in ((channel.isend, "send (tag 7) to"), (channel.irecv, "receive (tag 7) from")):
        with pytest.raises(p2p.PipelineCommError) as info:
            post(torch.zeros(2), 1, 7)
        assert info.value.kind == "peer"
        assert f"pipeline {what} pipeline rank 1 failed after 0.00 s" in str(info.value)
        assert "the peer rank failed or exited" in str(info.value)
