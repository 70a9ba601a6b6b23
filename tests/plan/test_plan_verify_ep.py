"""``--verify`` with expert parallelism (``ep > 1``) trains the model it trains at ``ep = 1``:
one verify step of an expert-parallel layout on gloo ranks (the experts split by
``ExpertParallel`` over ``ep``, sharded by FSDP2 over the expert-data-parallel ranks or
reduced over them under DDP, their states sharded over them under ZeRO 1; under a pipeline,
each stage's experts so, the all-to-alls inside torch's schedules) gives each rank the loss
(under a pipeline, each last-stage rank), the gradients and, after one AdamW step, the
parameters of the whole decoder trained in one process on every rank's batch (fp32); with tp,
as torchtitan with etp=1 (whole experts, each tp rank dispatching its share of the tokens).
What it does not run (experts split over tp, DDP under a split backward) is refused in one
line."""

from __future__ import annotations

from dataclasses import replace

import pytest

from distlab import launch
from distlab.plan.layout import Layout
from distlab.plan.model import ModelSpec
from distlab.plan.verify.rank import unsupported_reason
from helpers.leaks import no_leaks
from helpers.verify_ep_targets import ep_step_vs_one_process

TINY_MOE = ModelSpec("tiny-moe", 2, 64, 4, 128, 16, kv_heads=2, ffn_hidden=128, gated_ffn=True,
                     experts=8, top_k=2, expert_ffn=32, shared_experts=1, dense_layers=1)

TINY_MOE_4 = replace(TINY_MOE, name="tiny-moe-4", layers=4)   # a dense layer, then three MoE

TOL = 1e-4   # relative to each tensor's largest element (fp32 sums in another order)


def _equal_to_one_process(out: list[dict[str, float]], layout: Layout) -> None:
    """Every rank's gradients and parameters within :data:`TOL` of one process's, each rank
    holding experts; the loss equal on every rank that computes one (under a pipeline, the
    ranks of the last stage: one per data-parallel and tensor-parallel rank)."""
    with_loss = [d["loss"] for d in out if "loss" in d]
    assert len(with_loss) == layout.dp * layout.tp
    assert max(with_loss) < 1e-5, with_loss
    for rank, diffs in enumerate(out):
        assert any(k.startswith("grad ") and ".moe.experts." in k for k in diffs), rank
        bad = {k: v for k, v in diffs.items() if k != "loss" and v > TOL}
        assert not bad, (rank, bad)


def _step_equals_one_process(model: object, layout: Layout) -> None:
    """One verify step of ``model`` on ``layout``'s ranks equals one process's (no leaks)."""
    with no_leaks():
        out = launch.run(ep_step_vs_one_process, layout.gpus, args=(model, layout),
                         timeout=240)
    _equal_to_one_process(out, layout)


@pytest.mark.parametrize("layout", [
    Layout(dp=2, ep=2, zero=3, micro_batch=1, global_batch=4),   # edp 1: ep == dp
    Layout(dp=2, ep=2, zero=2, micro_batch=2, global_batch=4),
    Layout(dp=2, ep=2, zero=0, micro_batch=1, global_batch=4),   # DDP + experts over edp
    Layout(dp=4, ep=2, zero=3, micro_batch=1, global_batch=4),   # edp 2
    Layout(dp=4, ep=2, zero=0, micro_batch=1, global_batch=4),
    Layout(dp=4, ep=2, zero=1, micro_batch=1, global_batch=4),   # two ZeROs: dp and edp
    Layout(dp=2, ep=2, zero=1, micro_batch=2, global_batch=4),
], ids=lambda lay: lay.label)
def test_an_expert_parallel_verify_step_equals_one_process(layout: Layout) -> None:
    _step_equals_one_process(TINY_MOE, layout)


@pytest.mark.parametrize("layout", [
    Layout(dp=2, pp=2, ep=2, zero=3, global_batch=4),                           # FSDP2, 1F1B
    Layout(dp=2, pp=2, ep=2, zero=0, schedule="Interleaved1F1B", stages_per_rank=2,
           global_batch=4, recompute="op"),                     # DDP, two stages a rank
    Layout(dp=2, pp=2, ep=2, zero=1, schedule="GPipe", global_batch=4),         # two ZeROs
    Layout(dp=2, pp=2, ep=2, zero=2, schedule="ZBVZeroBubble", stages_per_rank=2,
           global_batch=4),                                     # a V, the backward split
], ids=lambda lay: lay.label)
def test_an_expert_parallel_pipeline_verify_step_equals_one_process(layout: Layout) -> None:
    # each stage's experts split over its ep ranks, their all-to-alls inside the schedule
    _step_equals_one_process(TINY_MOE_4, layout)


@pytest.mark.parametrize("layout", [
    Layout(tp=2, ep=2, etp=1, zero=3, sequence_parallel=True, global_batch=2),
    Layout(tp=2, ep=2, etp=1, zero=3, micro_batch=2, global_batch=2,
           recompute="full"),                                     # no SP, recomputed
    Layout(dp=2, tp=2, ep=2, etp=1, zero=3, global_batch=4),      # experts FSDP over edp 2
    Layout(dp=2, tp=2, ep=4, etp=1, zero=2, sequence_parallel=True,
           global_batch=4),                                       # ep borrows tp and dp
    Layout(tp=2, pp=2, ep=2, etp=1, zero=3, sequence_parallel=True, global_batch=2),
], ids=lambda lay: lay.label)
def test_expert_parallelism_borrowing_tp_equals_one_process(layout: Layout) -> None:
    # etp=1, as torchtitan: whole experts, each tp rank routing and dispatching its share of
    # the batch * seq tokens (no token twice), the MoE outputs summed over tp
    _step_equals_one_process(TINY_MOE_4, layout)


@pytest.mark.parametrize(("layout", "match"), [
    (Layout(dp=2, tp=2, ep=2, zero=3, global_batch=2),
     "expert parallelism is not run with tp=2"),
    (Layout(dp=2, tp=2, pp=2, ep=2, zero=3, global_batch=2),
     "expert parallelism is not run with tp=2 and etp=tp: verify does not split each "
     "expert's matrices over tp"),
    (Layout(dp=2, tp=4, ep=2, etp=1, zero=3, global_batch=2),
     "ep=2 not a multiple of tp=4"),
    (Layout(dp=2, tp=2, ep=2, etp=1, zero=0, global_batch=2),
     "ZeRO 0 with tp=2 is not run"),
    (Layout(dp=2, pp=2, ep=2, zero=0, schedule="InterleavedZeroBubble", stages_per_rank=2,
            global_batch=4), "DDP never averages them"),
    (Layout(dp=2, pp=2, zero=1, schedule="ZBVZeroBubble", stages_per_rank=2, global_batch=4),
     "ZeRO 1 with dp=2 is not run under ZBVZeroBubble"),
    (Layout(dp=2, tp=2, ep=2, zero=2, recompute="op", global_batch=2),
     "per-op recompute (op) is not run with ep=2 and ZeRO 2"),
])
def test_what_verify_does_not_run_with_experts_or_a_pipeline_is_one_line(layout: Layout,
                                                                         match: str) -> None:
    reason = unsupported_reason(layout)
    assert reason is not None and match in reason and "\n" not in reason
    assert unsupported_reason(layout.with_(zero=3, tp=1, recompute="full")) is None
