"""``--verify`` with expert parallelism (``ep > 1``) trains the model it trains at ``ep = 1``:
one verify step of an expert-parallel layout on gloo ranks (the experts split by
``ExpertParallel`` over ``ep``, sharded by FSDP2 over the expert-data-parallel ranks or
reduced over them under DDP, their states sharded
over them under ZeRO 1) gives each rank the loss, the gradients and, after one AdamW step,
the parameters of the whole decoder trained in one process on every rank's batch (fp32)."""

from __future__ import annotations

import pytest

from distlab import launch
from distlab.plan.layout import Layout
from distlab.plan.model import ModelSpec
from distlab.plan.verify.rank import unsupported_reason
from helpers.leaks import no_leaks
from helpers.verify_ep_targets import ep_step_vs_one_process

TINY_MOE = ModelSpec("tiny-moe", 2, 64, 4, 128, 16, kv_heads=2, ffn_hidden=128, gated_ffn=True,
                     experts=8, top_k=2, expert_ffn=32, shared_experts=1, dense_layers=1)

TOL = 1e-4   # relative to each tensor's largest element (fp32 sums in another order)


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
    with no_leaks():
        out = launch.run(ep_step_vs_one_process, layout.gpus, args=(TINY_MOE, layout),
                         timeout=240)
    for rank, diffs in enumerate(out):
        assert diffs["loss"] < 1e-5, (rank, diffs["loss"])
        assert any(k.startswith("grad layers.1.moe.experts") for k in diffs)
        bad = {k: v for k, v in diffs.items() if k != "loss" and v > TOL}
        assert not bad, (rank, bad)


@pytest.mark.parametrize(("layout", "match"), [
    (Layout(dp=2, tp=2, ep=2, zero=3, global_batch=2),
     "expert parallelism is not run with tp=2"),
    (Layout(dp=2, pp=2, ep=2, zero=3, global_batch=2),
     "expert parallelism is not run with pp=2"),
])
def test_what_expert_parallel_verify_does_not_run_is_one_line(layout: Layout,
                                                               match: str) -> None:
    reason = unsupported_reason(layout)
    assert reason is not None and match in reason and "\n" not in reason
    assert unsupported_reason(layout.with_(zero=3, tp=1, pp=1)) is None
