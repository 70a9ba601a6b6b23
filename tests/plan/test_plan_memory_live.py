"""The memory model beside what a real step holds, counted from live tensors on CPU.

A small decoder (:class:`distlab.plan.live_memory.Net`, its shape a ModelSpec that
``spec_from_module`` reads back) trains one fp32 step: in this process without parallelism
(eager attention with and without dropout, the CPU flash kernel, grouped-query and gated), and
on 2 gloo ranks with distlab's ZeroDataParallel (ZeRO 0-3) and distlab's tensor parallelism
(``parallelize_module``, with and without sequence parallelism: the library's
``live_activation_memory``, as notebook 16 runs it), and cut into two pipeline
stages under distlab's 1F1B and GPipe (the peak of the live saved tensors of the microbatches in
flight on each stage, beside ``memory_per_rank``). Model states must equal the
model exactly; activations (autograd's saved tensors, each byte once) within 5% of it, and
above it by no more than the small per-token tensors the model leaves out (the layer norms'
fp32 mean and rstd, the loss's and the embedding's per-token values).

The model's settings for this run (``CPU_SETTINGS``): 4-byte activations and 4-byte dropout
masks (torch's CPU dropout keeps its mask in the activation dtype), and
``sp_saves_gathered=True``: distlab's (and torch's) ``ColwiseParallel`` keeps its all-gathered
input.
"""

from __future__ import annotations

import pytest
import torch

from distlab import launch
from distlab.plan.layout import Layout
from distlab.plan.live_memory import (
    BATCH,
    CASES,
    CPU_SETTINGS,
    build,
    cpu_layout,
    layer_kept_bytes,
    left_out_bytes,
    live_activation_memory,
    saved_and_step,
    stored_activations,
)
from distlab.plan.memory import layer_activation_nbytes, memory_per_gpu, memory_per_rank
from distlab.plan.model import ModelSpec, spec_from_module
from helpers.leaks import no_leaks
from helpers.plan_memory_ranks import pipeline_rank, zero_rank

SPECS = {
    # GPT-like: MHA, two-matrix MLP (4 h), layer norms, biases
    "gpt": ModelSpec("gpt", 2, 64, 4, 128, 32, norm="layernorm", attention_bias=True,
                     mlp_bias=True),
    # Llama-like: 2 key/value heads for 4 query heads, gated MLP (f = 1.5 h), no biases
    "llama": ModelSpec("llama", 2, 64, 4, 128, 32, kv_heads=2, ffn_hidden=96, gated_ffn=True,
                       norm="layernorm"),
    # Qwen3-MoE-like attention: heads of head_dim 32, wider than hidden / heads (Q and the
    # attention's output 128 wide on a 64-wide model)
    "wide": ModelSpec("wide", 2, 64, 4, 128, 32, kv_heads=2, ffn_hidden=96, gated_ffn=True,
                      norm="layernorm", head_dim=32),
}
DROPOUT = 0.1
TP_RUNS = [("gpt", "eager", DROPOUT), ("llama", "flash", 0.0), ("wide", "flash", 0.0)]


def _check_activations(measured: int, model: int, spec: ModelSpec) -> None:
    assert abs(measured / model - 1) <= 0.05, (measured, model)
    assert 0 <= measured - model <= left_out_bytes(spec), (measured, model)


def _check_states(measured: dict[str, int], est) -> None:
    assert (measured["params"], measured["grads"], measured["optimizer"]) == est.states_held


@pytest.mark.parametrize(("name", "attention", "dropout"), [
    ("gpt", "eager", DROPOUT), ("gpt", "eager", 0.0), ("gpt", "flash", 0.0),
    ("llama", "flash", 0.0), ("llama", "eager", 0.0), ("llama", "eager", DROPOUT),
    ("wide", "flash", 0.0), ("wide", "eager", DROPOUT)])
def test_one_process(name: str, attention: str, dropout: float) -> None:
    torch.set_num_threads(1)
    spec = SPECS[name]
    net = build(spec, dropout)
    assert spec_from_module(net, seq_len=spec.seq_len, name=name) == spec
    measured = saved_and_step(net, spec, attention)
    est = memory_per_gpu(spec, cpu_layout(), attention=attention, dropout=dropout > 0,
                         **CPU_SETTINGS)
    _check_activations(measured["activations"], stored_activations(est), spec)
    _check_states(measured, est)


def test_zero_on_two_ranks() -> None:
    with no_leaks():
        ranks = launch.run(zero_rank, 2, args=(SPECS["llama"],), timeout=90)
    for out in ranks:
        for stage in range(4):
            est = memory_per_gpu(SPECS["llama"], cpu_layout(dp=2, zero=stage), **CPU_SETTINGS)
            _check_states(out[f"zero{stage}"], est)


@pytest.mark.parametrize(("name", "attention", "dropout"), TP_RUNS)
def test_tensor_parallel_on_two_ranks(name: str, attention: str, dropout: float) -> None:
    """Tensor parallelism over 2 ranks with and without sequence parallelism (and the whole
    step in each rank's process): each rank's count against the model of its own layout."""
    spec = SPECS[name]
    with no_leaks():
        rows = live_activation_memory(spec, attention=attention, dropout=dropout, timeout=90)
    assert [(r.case, r.rank) for r in rows] == [(c, k) for c in CASES for k in range(2)]
    for row in rows:
        layout = cpu_layout(tp=row.case.tp, sequence_parallel=row.case.sequence_parallel)
        est = memory_per_gpu(spec, layout, attention=attention, dropout=dropout > 0,
                             **CPU_SETTINGS)
        assert row.estimate == est and row.model == stored_activations(est)
        assert row.left_out == left_out_bytes(spec)
        _check_activations(row.measured, stored_activations(est), spec)
        assert abs(row.memory_error_pct) <= 5
        _check_states(row.states, est)
        assert row.states_match


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
    est = memory_per_rank(PIPE_SPEC, layout, attention=attention, **CPU_SETTINGS)
    assert tuple(r["in_flight"] for r in ranks) == in_flight
    for out, e, held in zip(ranks, est, in_flight, strict=True):
        model = stored_activations(e)
        assert abs(out["peak"] / model - 1) <= 0.05, (out, model)
        assert 0 <= out["peak"] - model <= left_out_bytes(PIPE_SPEC, held), (out, model)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_per_op_checkpointing_keeps_exactly_what_the_model_counts(name: str) -> None:
    """One layer under torch's selective checkpointing with torchtitan's per-op policy (CPU
    flash attention): the bytes of live storages its forward left for backward equal
    ``layer_activation_nbytes(recompute="op")`` byte for byte (Llama-like: input, Q, V, gate,
    down, the kernel's output and log-sum-exp; GPT-like with biases: the linears run as
    ``addmm``, which the policy does not keep). Without checkpointing the same count is the
    model's ``"none"`` plus the two norms' fp32 statistics, which the model leaves out."""
    spec = SPECS[name]
    lay = cpu_layout(recompute="op")
    op = layer_kept_bytes(spec, "op")
    assert op == layer_activation_nbytes(spec, lay, attention="flash", **_layer_settings())
    none = layer_kept_bytes(spec, "none")
    model_none = layer_activation_nbytes(spec, lay.with_(recompute="none"), attention="flash",
                                         **_layer_settings())
    assert none - model_none == 2 * BATCH * spec.seq_len * 8
    assert op < none


def _layer_settings() -> dict:
    return {k: v for k, v in CPU_SETTINGS.items() if k != "device_bytes"}
