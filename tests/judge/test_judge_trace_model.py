"""The NCCL model beside every collective kernel: wait + transfer = kernel, the all-reduce model
is predict_builtin(..., nccl_model="measured"), error = (measured - model) / model, and a reason
wherever a kernel is not priced (other collectives: tests/judge/test_judge_trace_kinds.py)."""

from __future__ import annotations

import json

import pytest

from distlab.collectives.model.predict import predict_builtin
from distlab.judge.trace_model import box_for_gpu, price_collectives
from distlab.trace.collectives import match_collectives
from distlab.trace.torch_trace import read_run
from helpers.paths import RESULTS
from helpers.trace_synth import synth_rank


def _judge(run):
    col = match_collectives(run)
    return price_collectives(col, {r: rt.gpu for r, rt in run.ranks.items()},
                             {r: rt.nccl_version for r, rt in run.ranks.items()})


def _write(tmp_path, gpu="NVIDIA H100 80GB HBM3", **kw):
    starts = {0: [10_000.0, 30_000.0], 1: [10_400.0, 30_000.0]}
    for r, s in starts.items():
        d = synth_rank(r, 2, seed=9, steps=2, comm_starts=s, gpu=gpu, nccl_version="2.24.3",
                       **kw)
        (tmp_path / f"rank{r}.json").write_text(json.dumps(d))
    return read_run(tmp_path)


def test_priced_with_predict_builtin(tmp_path) -> None:
    prices = _judge(_write(tmp_path))
    assert len(prices) == 4 and all(p.model_us is not None for p in prices)
    for p in prices:
        assert p.wait_us + p.transfer_us == pytest.approx(p.kernel_us)
        want = predict_builtin("h100_sxm8", 2, [p.nbytes], itemsize=4, nccl_model="measured",
                               nccl_version="2.24.3")[0] * 1e6
        assert p.model_us == pytest.approx(want)
        assert p.error_percent == pytest.approx(100 * (p.transfer_us - want) / want)
    first = {p.rank: p for p in prices if p.seq == 0}
    assert first[0].wait_us == pytest.approx(min(400.0, first[0].kernel_us))
    assert first[1].wait_us == 0.0


@pytest.mark.parametrize("kw, why", [
    ({"gpu": "Tesla V100-SXM2-32GB"}, "none of the NCCL model's boxes"),
    ({"gpu": None}, "GPU not stated"),
    ({"collective_args": False}, "message size unknown"),
])
def test_one_line_why_not_priced(tmp_path, kw, why) -> None:
    prices = _judge(_write(tmp_path, **kw))
    if kw.get("collective_args") is False:
        # the launching record_param_comms still states the message: priced after all
        assert all(p.model_us is not None for p in prices)
        return
    assert prices and all(p.model_us is None and why in p.why for p in prices)


def test_published_a100_trace() -> None:
    """Its 15 all-reduce and 6 broadcast kernels are all priced, each by its own model."""
    from distlab.nccl.family import nccl_collective

    run = read_run(RESULTS / "traces" / "hta_a100_2ranks_rank0")
    prices = _judge(run)
    assert all(p.model_us is not None for p in prices)
    kinds = [p.collective for p in prices]
    assert (kinds.count("all_reduce"), kinds.count("broadcast"), len(kinds)) == (15, 6, 21)
    assert all("peers' traces absent" in p.note for p in prices)
    for p in prices:
        assert p.size_source == "own args" and p.algorithm and p.protocol
        if p.collective == "broadcast":
            run_ = nccl_collective("a100_sxm8", 2, [p.nbytes], "broadcast")[0]
            assert p.model_us == pytest.approx(run_.seconds * 1e6)
            assert (p.algorithm, p.protocol) == (run_.algorithm, run_.protocol)
            assert "NCCL 2.17.1 priced as 2.28" in p.note
    assert box_for_gpu("NVIDIA A100-PG509-200") == "a100_sxm8"


def test_an_absent_peer_makes_the_wait_unknown_not_zero() -> None:
    """Rank 1's trace is not given: no wait is 0, the whole kernel stands beside the model, and
    the report, the JSON and the figure say so."""
    from distlab.judge.trace_judgement import judge_trace, judgement_json
    from distlab.judge.trace_report import report_lines
    from distlab.viz.trace import model_figure

    j = judge_trace(RESULTS / "traces" / "hta_a100_2ranks_rank0")
    priced = [p for p in j.prices if p.model_us is not None]
    assert priced and all(p.wait_us is None and p.transfer_us is None for p in priced)
    assert all(p.measured_us == p.kernel_us and p.measured == "kernel (wait unknown)"
               for p in priced)
    lines = report_lines(j)
    assert not any("wait 0 +" in line for line in lines)
    assert sum("(wait unknown)" in line for line in lines) == 5
    assert any(line.startswith("  ... and 16 more") for line in lines)
    assert sum(line.startswith("  note: peers' traces absent") for line in lines) == 2
    doc = judgement_json(j)
    assert all(m["wait_us"] is None and m["measured"] == "kernel (wait unknown)"
               for m in doc["model"] if m["model_us"] is not None)
    ax = model_figure(j).axes[0]
    assert "whole kernel" in ax.get_ylabel()
    assert not any("after the last peer" in t.get_text() for t in ax.get_legend().get_texts())


def test_gloo_calls_priced_by_the_gloo_model() -> None:
    """gloo spans state their own tensor (Input Dims, Input type): all-reduces stand beside
    gloo's ring on the shipped loopback calibration, all-gathers beside distlab's ring plan of the
    gathered buffer; sends and receives, and a group whose peers' traces are absent, are not
    priced, each with its reason."""
    from distlab.collectives.algorithms.registry import build_plan
    from distlab.collectives.model.choice import schedule_seconds, shipped_calibration
    from distlab.judge.trace_judgement import judge_trace
    from distlab.judge.trace_model import GLOO_NOTE, GLOO_P2P_WHY

    ddp = judge_trace(RESULTS / "traces" / "gloo_ddp_2ranks").prices
    assert len(ddp) == 6 and all(p.library == "gloo" and p.size_source == "own args"
                                 for p in ddp)
    expected = predict_builtin("loopback", 2, [66049 * 4], itemsize=4)[0] * 1e6
    assert all(p.nbytes == 66049 * 4 and p.model_us == pytest.approx(expected, rel=1e-12)
               and p.algorithm == "gloo ring" and GLOO_NOTE in (p.note or "") for p in ddp)
    fsdp = judge_trace(RESULTS / "traces" / "gloo_fsdp2_2ranks").prices
    gathers = [p for p in fsdp if p.collective == "all_gather"]
    ring = schedule_seconds(shipped_calibration(), build_plan("all_gather", "ring", 2, 262656),
                            4) * 1e6
    assert len(gathers) == 48 and {p.nbytes for p in gathers} == {262656 * 4}
    assert all(p.model_us == pytest.approx(ring) and p.algorithm == "ring plan"
               for p in gathers)
    pp = judge_trace(RESULTS / "traces" / "gloo_pp_1f1b_2ranks").prices
    assert pp and all(p.model_us is None and p.why == GLOO_P2P_WHY for p in pp)
    lone = judge_trace(RESULTS / "traces" / "hta_cpu_only").prices
    assert lone and all(p.model_us is None and "peers' traces absent" in (p.why or "")
                        for p in lone)
