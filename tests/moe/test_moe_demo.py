"""The expert-parallel demo: a real run on gloo ranks agrees with one process, and what it
reports (rows sent and received, all-to-alls, tokens routed) is consistent."""

from __future__ import annotations

import pytest

from distlab.moe.demo import TOLERANCE, run_expert_parallel
from helpers.leaks import no_leaks


@pytest.mark.multiprocess
@pytest.mark.parametrize("ranks,experts", [(2, 8), (4, 8)])
def test_expert_parallel_run_agrees_with_one_process(ranks, experts):
    with no_leaks():
        run = run_expert_parallel(ranks, num_experts=experts, top_k=2, batch=2, seq_len=8,
                                  timeout=240)
    assert run.agrees(TOLERANCE), run.summary_lines()
    assert set(run.grad_errors) >= {"proj.weight", "moe.router.gate.weight", "moe.experts.w1",
                                    "moe.shared_experts.w1.weight"}
    assert run.local_experts == experts // ranks
    assert all(a == {"counts": 1, "dispatch": 1, "combine": 1, "dispatch backward": 1,
                     "combine backward": 1} for a in run.a2a)
    tokens = 2 * 8
    for r in range(ranks):
        assert sum(run.tokens_per_expert[r]) == tokens * 2        # top-2, dropless
        assert sum(run.sent[r]) == tokens * 2
        # rows rank r sends to rank d are those routed to rank d's experts
        per = experts // ranks
        assert list(run.sent[r]) == [sum(run.tokens_per_expert[r][d * per:(d + 1) * per])
                                     for d in range(ranks)]
        # what rank d receives from r is what r sent to d
        assert all(run.received[d][r] == run.sent[r][d] for d in range(ranks))
    lines = run.summary_lines()
    assert lines[-1].startswith("vs one process: output within")
    assert not run.agrees(-1.0)                                   # a tolerance it cannot meet


@pytest.mark.parametrize("kwargs,needle", [
    ({"ranks": 3}, "ranks=3 must divide num_experts=8"),
    ({"ranks": 0}, "ranks"),
    ({"top_k": 9}, "top_k"),
    ({"seq_len": 0}, "seq_len"),
])
def test_bad_sizes_name_the_argument(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        run_expert_parallel(**kwargs)
