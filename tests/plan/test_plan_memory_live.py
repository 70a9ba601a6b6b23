"""The memory model beside what a real step holds, counted from live tensors on CPU.

A small decoder (:class:`helpers.plan_memory_ranks.Net`, its shape a ModelSpec that
``spec_from_module`` reads back) trains one fp32 step: in this process without parallelism
(eager attention with and without dropout, the CPU flash kernel, grouped-query and gated), and
on 2 gloo ranks with distlab's ZeroDataParallel (ZeRO 0-3) and distlab's tensor parallelism
(``parallelize_module``, with and without sequence parallelism), and cut into two pipeline
stages under distlab's 1F1B and GPipe (the peak of the live saved tensors of the microbatches in
flight on each stage, beside ``memory_per_rank``). Model states must equal the
model exactly; activations (autograd's saved tensors, each byte once) within 5% of it, and
above it by no more than the small per-token tensors the model leaves out (the layer norms'
fp32 mean and rstd, the loss's and the embedding's per-token values).

The model's settings for this run: 4-byte activations and 4-byte dropout masks (torch's CPU
dropout keeps its mask in the activation dtype), and ``sp_saves_gathered=True``: distlab's (and
torch's) ``ColwiseParallel`` keeps its all-gathered input.
"""

from __future__ import annotations

import pytest
import torch

from distlab import launch
from distlab.plan.layout import Layout
from distlab.plan.memory import MemoryEstimate, memory_per_gpu, memory_per_rank
from distlab.plan.model import ModelSpec, spec_from_module
from helpers.leaks import no_leaks
from helpers.plan_memory_ranks import BATCH, build, parallel_rank, pipeline_rank, saved_and_step

SPECS = {
    # GPT-like: MHA, two-matrix MLP (4 h), layer norms, biases
    "gpt": ModelSpec("gpt", 2, 64, 4, 128, 32, norm="layernorm", attention_bias=True,
                     mlp_bias=True),
    # Llama-like: 2 key/value heads for 4 query heads, gated MLP (f = 1.5 h), no biases
    "llama": ModelSpec("llama", 2, 64, 4, 128, 32, kv_heads=2, ffn_hidden=96, gated_ffn=True,
                       norm="layernorm"),
}
DROPOUT = 0.1
CPU = {"dtype_bytes": 4, "mask_bytes": 4, "sp_saves_gathered": True, "overhead_fraction": 0.0}
TP_CASES = [("gpt", "eager", DROPOUT, False), ("gpt", "eager", DROPOUT, True),
            ("llama", "flash", 0.0, False), ("llama", "flash", 0.0, True)]


def _layout(**fields) -> Layout:
    fields.setdefault("global_batch", BATCH * fields.get("dp", 1))
    return Layout(micro_batch=BATCH, precision="fp32", **fields)


def _left_out(spec: ModelSpec) -> int:
    """Bytes the model leaves out at most: per token, 8 per layer norm (fp32 mean and rstd)
    and 32 for the loss's and the embedding lookup's per-token tensors (target, row sums,
    masks)."""
    norms = 2 * spec.layers + 1
    return BATCH * spec.seq_len * (8 * norms + 32)


def _stored(est: MemoryEstimate) -> int:
    """What the model says is kept from forward for backward (the live count is taken at the
    end of forward; backward's working set comes later)."""
    return est.activations - est.activation_parts.working


def _check_activations(measured: int, model: int, spec: ModelSpec) -> None:
    assert abs(measured / model - 1) <= 0.05, (measured, model)
    assert 0 <= measured - model <= _left_out(spec), (measured, model)


def _check_states(measured: dict[str, int], est) -> None:
    assert (measured["params"], measured["grads"], measured["optimizer"]) == \
        (est.params, est.grads, est.optimizer)


@pytest.mark.parametrize(("name", "attention", "dropout"), [
    ("gpt", "eager", DROPOUT), ("gpt", "eager", 0.0), ("gpt", "flash", 0.0),
    ("llama", "flash", 0.0), ("llama", "eager", 0.0), ("llama", "eager", DROPOUT)])
def test_one_process(name: str, attention: str, dropout: float) -> None:
    torch.set_num_threads(1)
    spec = SPECS[name]
    net = build(spec, dropout)
    assert spec_from_module(net, seq_len=spec.seq_len, name=name) == spec
    measured = saved_and_step(net, spec, attention)
    est = memory_per_gpu(spec, _layout(), attention=attention, dropout=dropout > 0, **CPU)
    _check_activations(measured["activations"], _stored(est), spec)
    _check_states(measured, est)


def test_zero_and_tensor_parallel_on_two_ranks() -> None:
    with no_leaks():
        ranks = launch.run(parallel_rank, 2, args=(SPECS, TP_CASES, "llama"), timeout=90)
    for out in ranks:
        for stage in range(4):
            est = memory_per_gpu(SPECS["llama"], _layout(dp=2, zero=stage), **CPU)
            _check_states(out[f"zero{stage}"], est)
        for name, attention, dropout, sp in TP_CASES:
            measured = out[f"tp {name} {attention} dropout={dropout} sp={sp}"]
            est = memory_per_gpu(SPECS[name], _layout(tp=2, sequence_parallel=sp),
                                 attention=attention, dropout=dropout > 0, **CPU)
            _check_activations(measured["activations"], _stored(est), SPECS[name])
            _check_states(measured, est)


PIPE_SPEC = ModelSpec("gpt4", 4, 64, 4, 128, 32, norm="layernorm", attention_bias=True,
                      mlp_bias=True)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("schedule", "attention", "in_flight"),
                         [("1F1B", "eager", (2, 1)), ("1F1B", "flash", (2, 1)),
                          ("GPipe", "flash", (4, 4))])
def test_pipeline_stages_hold_what_the_model_says(schedule: str, attention: str,
                                                  in_flight: tuple[int, int]) -> None:
    """Two stages of 2 blocks each (the embedding on the first, the output layer and the loss
    on the last), 4 microbatches: each rank's peak of live activation bytes is the model's
    per-rank activations (microbatches in flight from the schedule's plan: 1F1B keeps 2 on the
    first stage and 1 on the last, GPipe all 4 on both), above it by no more than the small
    per-token tensors the model leaves out, per microbatch in flight."""
    microbatches = 4
    with no_leaks():
        ranks = launch.run(pipeline_rank, 2, args=(PIPE_SPEC, schedule, microbatches, attention),
                           timeout=240)
    layout = Layout(pp=2, schedule=schedule, micro_batch=BATCH,
                    global_batch=BATCH * microbatches, precision="fp32")
    est = memory_per_rank(PIPE_SPEC, layout, attention=attention, **CPU)
    assert tuple(r["in_flight"] for r in ranks) == in_flight
    for out, e, held in zip(ranks, est, in_flight, strict=True):
        model = _stored(e)
        assert abs(out["peak"] / model - 1) <= 0.05, (out, model)
        assert 0 <= out["peak"] - model <= held * _left_out(PIPE_SPEC), (out, model)
