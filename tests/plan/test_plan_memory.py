"""Memory per GPU: Korthikanti et al.'s Table 2 in the paper's case, ZeRO's states as
zero_memory gives them, every parameter counted once per replica, the pipeline's microbatches in
flight from the plan, the allocated bytes monotone in the obvious directions, the parts summing
to the total, and bad input."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from distlab.pipeline_parallel.cost import activation_bytes, peak_in_flight
from distlab.pipeline_parallel.schedules.registry import build_plan
from distlab.plan.activations import (
    activation_options,
    backward_working_nbytes,
    forward_transient_nbytes,
)
from distlab.plan.layout import PRECISIONS, GpuKind, Layout, hardware
from distlab.plan.memory import (
    DEVICE_BYTES,
    NCCL_COMMUNICATOR_BYTES,
    PARTS,
    MemoryEstimate,
    communicators,
    layer_activation_nbytes,
    layer_activation_terms,
    memory_lower_bound,
    memory_per_gpu,
    memory_per_rank,
    rank_params,
)
from distlab.plan.model import PRESETS, ModelSpec
from distlab.tensor_parallel.memory import layer_activation_bytes, table2_bytes
from distlab.zero.memory_model import zero_memory

GPT3 = ModelSpec("gpt3-175b-shape", 96, 12288, 96, 51200, 2048)
PAPER = {"attention": "eager", "dropout": True, "mask_bytes": 1, "dtype_bytes": 2}
"""The paper's assumptions: eager attention with dropout, 1-byte masks, 16-bit activations."""
TABLE2 = [(1, False, "none"), (8, False, "none"), (8, True, "none"), (8, False, "selective"),
          (8, True, "selective"), (8, False, "full"), (8, True, "full")]
"""Every row of Korthikanti et al. 2022's Table 2 (and full recompute with sequence
parallelism)."""


@pytest.mark.parametrize(("tp", "sp", "recompute"), TABLE2)
def test_paper_case_is_table2(tp: int, sp: bool, recompute: str) -> None:
    lay = Layout(tp=tp, sequence_parallel=sp, recompute=recompute)
    got = layer_activation_nbytes(GPT3, lay, **PAPER)
    # the planner's model and tensor_parallel's paper terms read the same ModelSpec
    assert got == layer_activation_bytes(GPT3, tp, sequence_parallel=sp, recompute=recompute)
    assert got == pytest.approx(table2_bytes(GPT3, tp, sequence_parallel=sp,
                                             recompute=recompute), rel=1e-12)


@settings(max_examples=150, deadline=None)
@given(heads=st.sampled_from([1, 2, 4, 8, 16]), head_dim=st.sampled_from([4, 8, 64]),
       seq=st.integers(1, 16), b=st.integers(1, 4), row=st.sampled_from(TABLE2),
       tp=st.sampled_from([1, 2, 4, 8]))
def test_paper_case_is_table2_for_any_shape(heads: int, head_dim: int, seq: int, b: int,
                                            row: tuple[int, bool, str], tp: int) -> None:
    _, sp, recompute = row
    assume(heads % tp == 0)
    h, s = heads * head_dim, 8 * seq
    model = ModelSpec("m", 2, h, heads, 100, s)
    lay = Layout(tp=tp, sequence_parallel=sp, recompute=recompute, micro_batch=b,
                 global_batch=b)
    got = layer_activation_nbytes(model, lay, **PAPER)
    sp = lay.sequence_parallel
    assert got == layer_activation_bytes(model, tp, sequence_parallel=sp, recompute=recompute,
                                         micro_batch=b)
    assert got == pytest.approx(table2_bytes(model, tp, sequence_parallel=sp,
                                             recompute=recompute, micro_batch=b), rel=1e-12)


def _nbytes(terms, name: str) -> int:
    return sum(t.nbytes for t in terms if t.name == name)


def test_flash_gqa_and_swiglu_terms_by_hand() -> None:
    m = PRESETS["llama3-8b"]                     # h 4096, 32 heads, 8 kv heads, f 14336, gated
    s, b, h, f, k = m.seq_len, 1, m.hidden, m.ffn, m.kv_width
    flash = layer_activation_terms(m, b)
    assert k == 1024
    assert _nbytes(flash, "K") == _nbytes(flash, "V") == 2 * s * b * k
    assert _nbytes(flash, "softmax statistics (fp32 log-sum-exp)") == 4 * m.heads * s * b
    assert not any(t.quadratic for t in flash)
    mlp = sum(t.nbytes for t in flash if t.block == "mlp" and t.elements == s * b * f)
    assert mlp == 4 * 2 * s * b * f              # gate out, up out, SiLU out, product
    # six s b h tensors (two norm inputs, QKV and first linear inputs, Q, the attention
    # output), K and V kv wide, the statistics and four s b f tensors
    sbh = s * b * h
    assert sum(t.nbytes for t in flash) == 2 * sbh * 6 + 2 * 2 * s * b * k \
        + 4 * m.heads * s * b + 8 * s * b * f
    fused = layer_activation_terms(m, b, fused_swiglu=True)
    assert sum(t.nbytes for t in flash) - sum(t.nbytes for t in fused) == 2 * s * b * f
    eager = layer_activation_terms(m, b, attention="eager")
    assert _nbytes(eager, "K") == _nbytes(eager, "V") == 2 * sbh   # repeated per query head
    assert _nbytes(eager, "softmax output") == 2 * m.heads * s * s * b


@settings(max_examples=30, deadline=None)
@given(preset=st.sampled_from(sorted(PRESETS)), b=st.integers(1, 4), fused=st.booleans())
def test_float8_keeps_each_linear_only_input_in_8_bits(preset: str, b: int, fused: bool) -> None:
    """Under float8 (Transformer Engine's linears keep their quantized input) the inputs only a
    linear reads in backward, QKV's, the first MLP linear's and the last one's, drop to one byte;
    the attention output, which the kernel keeps in 16 bits, gains the output projection's
    8-bit copy; nothing else moves."""
    m = PRESETS[preset]
    s, h, f, q = m.seq_len, m.hidden, m.ffn, m.q_width
    bf16 = layer_activation_terms(m, b, fused_swiglu=fused)
    fp8 = layer_activation_terms(m, b, fused_swiglu=fused, linear_bytes=1)
    saved = 2 * s * b * h + s * b * f     # each of them one byte less per element
    assert sum(t.nbytes for t in bf16) - sum(t.nbytes for t in fp8) == saved - s * b * q
    assert _nbytes(fp8, "output projection input (attention output)") == 2 * s * b * q
    assert _nbytes(fp8, "output projection input (its low-precision copy)") == s * b * q
    assert _nbytes(fp8, "QKV linear input") == _nbytes(fp8, "first linear input") == s * b * h
    assert {t.name for t in bf16} < {t.name for t in fp8}


def test_a_float8_layout_keeps_its_linears_inputs_in_8_bits() -> None:
    from distlab.plan.activations import activation_options, layer_kept_tensors

    m = PRESETS["llama3-8b"]
    bf16 = Layout(dp=8, global_batch=8)
    fp8 = bf16.with_(compute_dtype="fp8")
    opt = activation_options(bf16, "flash", False, None, 1, False, False)
    s, h, f, q = m.seq_len, m.hidden, m.ffn, m.q_width
    assert sum(layer_kept_tensors(m, bf16, opt)) - sum(layer_kept_tensors(m, fp8, opt)) \
        == 2 * s * h + s * f - s * q
    assert memory_per_gpu(m, fp8).activations < memory_per_gpu(m, bf16).activations
    with pytest.raises(ValueError, match="moe_weighting"):
        memory_per_gpu(m, bf16, moe_weighting="router")


def test_dropout_masks_only_with_dropout() -> None:
    m = PRESETS["gpt3-1.3b"]
    s, h, a = m.seq_len, m.hidden, m.heads
    for attention, masks in (("eager", 2 * s * h + a * s * s), ("flash", 2 * s * h)):
        off = layer_activation_terms(m, attention=attention)
        on = layer_activation_terms(m, attention=attention, dropout=True)
        got = sum(t.nbytes for t in on if "mask" in t.name)
        assert got == masks
        assert not any("mask" in t.name for t in off)
        extra = 2 * a * s * s if attention == "eager" else 0   # the softmax dropout's output
        assert sum(t.nbytes for t in on) - sum(t.nbytes for t in off) == masks + extra
    # CPU dropout keeps its mask in the activation dtype
    wide = layer_activation_terms(m, dropout=True, mask_bytes=4)
    assert sum(t.nbytes for t in wide if "mask" in t.name) == 4 * 2 * s * h


def test_context_parallel_divides_the_sequence() -> None:
    m = PRESETS["llama3-70b"]
    one = layer_activation_nbytes(m, Layout(tp=8, sequence_parallel=True))
    two = layer_activation_nbytes(m, Layout(tp=8, cp=2, sequence_parallel=True))
    assert two * 2 == one
    with pytest.raises(ValueError, match="attention='eager' with cp=2"):
        layer_activation_nbytes(m, Layout(cp=2), attention="eager")


def test_sequence_parallel_keeping_gathered_inputs_adds_them_whole() -> None:
    m = PRESETS["llama3-8b"]
    lay = Layout(tp=4, sequence_parallel=True)
    sbh2 = m.seq_len * m.hidden * 2
    regather = layer_activation_nbytes(m, lay)
    kept = layer_activation_nbytes(m, lay, sp_saves_gathered=True)
    assert kept - regather == 2 * (sbh2 - sbh2 // 4)    # QKV input and first linear input
    a = memory_per_gpu(m, lay.with_(global_batch=1))
    b = memory_per_gpu(m, lay.with_(global_batch=1), sp_saves_gathered=True)
    # torch's way: the output layer's input whole too, and no gather buffer of Megatron's
    assert b.activation_parts.total - a.activation_parts.total == \
        m.layers * (kept - regather) + sbh2 - sbh2 // 4
    # Megatron's way gathers the input again in forward and backward: one s b h more each
    opts = {k: activation_options(lay, "flash", False, None, 1, False, k == "kept")
            for k in ("regather", "kept")}
    assert forward_transient_nbytes(m, lay, opts["regather"]) \
        - forward_transient_nbytes(m, lay, opts["kept"]) == sbh2
    assert backward_working_nbytes(m, lay, opts["regather"]) \
        - backward_working_nbytes(m, lay, opts["kept"]) == sbh2


model_strategy = st.builds(
    lambda layers, heads, kv_div, head_dim, vocab, seq, ffn, gated, tied, bias, norm, pos:
    ModelSpec("m", layers, heads * head_dim, heads, vocab, seq, kv_heads=heads // kv_div,
              ffn_hidden=8 * ffn, gated_ffn=gated, tied_embeddings=tied, attention_bias=bias,
              mlp_bias=bias, norm=norm, positions=seq if pos else None),
    layers=st.integers(1, 9), heads=st.sampled_from([4, 8, 16]), kv_div=st.sampled_from([1, 2, 4]),
    head_dim=st.sampled_from([8, 16]), vocab=st.integers(1, 40).map(lambda v: 8 * v),
    seq=st.integers(1, 8).map(lambda s: 16 * s), ffn=st.integers(1, 32), gated=st.booleans(),
    tied=st.booleans(), bias=st.booleans(), norm=st.sampled_from(["layernorm", "rmsnorm"]),
    pos=st.booleans())


def _layout(model: ModelSpec, data) -> Layout:
    """A layout of ``model`` drawn from ``data`` (tp dividing the heads, kv heads and vocab)."""
    tp = data.draw(st.sampled_from([t for t in (1, 2, 4, 8)
                                    if model.kv % t == 0 and model.vocab % t == 0
                                    and model.ffn % t == 0]))
    pp = data.draw(st.sampled_from([p for p in (1, 2, 3, 4) if p <= model.layers]))
    schedule, v = data.draw(st.sampled_from([("1F1B", 1), ("GPipe", 1),
                                             ("Interleaved1F1B", 2), ("ZBVZeroBubble", 2)]))
    if pp == 1 or pp * v > model.layers:
        schedule, v = "1F1B", 1
    dp = data.draw(st.sampled_from([1, 2, 4]))
    cp = data.draw(st.sampled_from([c for c in (1, 2) if model.seq_len % c == 0]))
    m = pp * data.draw(st.integers(1, 3))
    mb = data.draw(st.sampled_from([1, 2]))
    return Layout(dp=dp, tp=tp, pp=pp, cp=cp, zero=data.draw(st.sampled_from([0, 1, 2, 3])),
                  sequence_parallel=data.draw(st.booleans()), schedule=schedule,
                  stages_per_rank=v, micro_batch=mb, global_batch=dp * mb * m,
                  recompute=data.draw(st.sampled_from(["none", "selective", "op", "full"])),
                  precision=data.draw(st.sampled_from(sorted(PRECISIONS))))


@settings(max_examples=120, deadline=None)
@given(model=model_strategy, data=st.data())
def test_every_parameter_is_counted_once_per_replica(model: ModelSpec, data) -> None:
    lay = _layout(model, data).with_(zero=0)
    ranks = rank_params(model, lay)
    tied_copies = sum(r.tied_copy for r in ranks)
    assert sum(r.split * lay.tp + r.replicated for r in ranks) == model.params
    assert sum(r.layers for r in ranks) == model.layers
    assert sorted(s for r in ranks for s in r.stages) == list(range(lay.stages))
    # a tied output layer keeps a copy only where the last stage is not on stage 0's rank
    assert (tied_copies > 0) == (model.tied_embeddings
                                 and not any({0, lay.stages - 1} <= set(r.stages)
                                             for r in ranks))
    p_b, g_b, o_b = PRECISIONS[lay.precision]
    ests = memory_per_rank(model, lay)
    for r, est in zip(ranks, ests, strict=True):
        assert est.states_held == (p_b * r.total, g_b * r.total, o_b * r.total)
        # without ZeRO the parameters are whole at the peak too (each tensor's request rounded
        # up to 512 bytes, as the allocator counts it: at most 9 tensors a layer, 3 more)
        assert 0 <= est.params - p_b * r.total <= 512 * (9 * r.layers + 3)
    # every GPU of the layout: each parameter once per data-parallel (and context) replica,
    # the tensor-parallel group's replicated ones once per GPU
    every_gpu = sum(e.states_held[0] for e in ests) * lay.tp * lay.dp * lay.cp
    replicated = sum(r.replicated for r in ranks) * (lay.tp - 1)
    assert every_gpu == p_b * lay.dp * lay.cp * (model.params + replicated
                                                 + tied_copies * lay.tp)
    if lay.tp == lay.cp == 1 and tied_copies == 0:
        assert sum(e.states_held[0] for e in ests) * lay.dp == model.params * p_b * lay.dp


@settings(max_examples=120, deadline=None)
@given(model=model_strategy, data=st.data(),
       precision=st.sampled_from(["fp32", "mixed"]))
def test_zero_parts_are_zero_memorys(model: ModelSpec, data, precision: str) -> None:
    lay = _layout(model, data).with_(precision=precision)
    for r, est in zip(rank_params(model, lay), memory_per_rank(model, lay), strict=True):
        z = zero_memory(r.total, lay.dp * lay.cp, lay.zero, precision)
        assert est.states_held == (z.params, z.grads, z.optimizer)
        assert est.params_held == r.total
        # the replay allocates the parameters as ZeRO shards them, at the peak too (each
        # tensor's shard rounded up to 512 bytes: at most 9 tensors a layer, 3 more)
        assert 0 <= est.params - z.params <= 512 * (9 * r.layers + 3) * 2


@settings(max_examples=100, deadline=None)
@given(model=model_strategy, data=st.data())
def test_more_sharding_and_recompute_never_add_bytes(model: ModelSpec, data) -> None:
    """Allocated bytes fall with more sharding and more recompute. What the caching allocator
    reserves beyond them need not (which block a request lands in changes with every size),
    so these compare the allocated peak and the lower bound, and the reserve is only checked
    to be the allocated peak or more."""
    lay = _layout(model, data)
    est = memory_per_gpu(model, lay)
    assert est.reserved >= est.allocated and est.total == est.reserved + est.device
    assert memory_lower_bound(model, lay) <= est.total
    # recompute: full <= selective <= none on every rank (the most loaded GPU may be another
    # rank under each), per-op checkpointing (whole row-parallel outputs) below none at tp 1
    by = {rc: memory_per_rank(model, lay.with_(recompute=rc))
          for rc in ("none", "selective", "op", "full")}
    for rank in range(lay.pp):
        # what is stored between forward and backward (full recompute's working layer, the one
        # recomputed in backward, comes on top: with one layer per rank it can outweigh it)
        stored = {rc: e[rank].activation_parts.total - e[rank].activation_parts.working
                  for rc, e in by.items()}
        assert stored["full"] <= stored["selective"] <= stored["none"]
        if lay.tp == 1:
            assert stored["full"] <= stored["op"] <= stored["none"]
    # tensor parallelism: each doubling that still divides the model
    tps = [t for t in (1, 2, 4, 8) if model.heads % t == 0 and model.ffn % t == 0
           and (model.kv % t == 0 or t % model.kv == 0)
           and (model.seq_len // lay.cp) % t == 0]
    # (the most allocated rank's bytes: the GPU memory_per_gpu reports is the one with the most
    # reserved, which may be another pipeline rank under each tp, e.g. tp 4 and 8 of a 7-layer
    # ZBV pipeline, where its allocated bytes rose from tp 4 to 8 while every rank's fell)
    allocated = [max(e.allocated for e in memory_per_rank(model, lay.with_(tp=t))) for t in tps]
    assert allocated == sorted(allocated, reverse=True)
    # ZeRO: stages 0, 1, 2 shard more and more (with someone to shard with)
    if lay.dp * lay.cp > 1:
        zs = [max(e.states for e in memory_per_rank(model, lay.with_(zero=z)))
              for z in (0, 1, 2)]
        assert zs == sorted(zs, reverse=True)
    assert est.total == max(e.total for e in memory_per_rank(model, lay)
                            if e.pp_rank in (0, lay.pp - 1, est.pp_rank)) >= 0


def test_most_allocated_rank_falls_with_tp_where_the_reported_gpu_changes_rank() -> None:
    """The case hypothesis found: a 7-layer model on a 2-rank ZBV pipeline, where the GPU with
    the most reserved bytes is rank 0 at tp 4 and rank 1 at tp 8; every rank's allocated bytes
    still fall with each doubling of tp."""
    model = ModelSpec("m", 7, 128, 8, 8, 96, kv_heads=8, ffn_hidden=8, gated_ffn=False,
                      attention_bias=False, mlp_bias=False, norm="layernorm", positions=None)
    lay = Layout(pp=2, schedule="ZBVZeroBubble", stages_per_rank=2, global_batch=2,
                 precision="fp32")
    by_tp = [memory_per_rank(model, lay.with_(tp=t)) for t in (1, 2, 4, 8)]
    for rank in range(2):
        per_rank = [ests[rank].allocated for ests in by_tp]
        assert per_rank == sorted(per_rank, reverse=True)
    assert [memory_per_gpu(model, lay.with_(tp=t)).pp_rank for t in (4, 8)] == [0, 1]


@pytest.mark.parametrize(("schedule", "v", "pp", "m"), [
    ("1F1B", 1, 4, 8), ("GPipe", 1, 4, 6), ("Interleaved1F1B", 2, 4, 8),
    ("LoopedBFS", 2, 2, 4), ("InterleavedZeroBubble", 2, 4, 8), ("ZBVZeroBubble", 2, 4, 8),
    ("DualPipeV", 2, 4, 8)])
def test_microbatches_in_flight_come_from_the_plan(schedule: str, v: int, pp: int,
                                                   m: int) -> None:
    model = ModelSpec("m", 3 * pp * v, 64, 4, 256, 64)
    lay = Layout(pp=pp, schedule=schedule, stages_per_rank=v, global_batch=m)
    one = memory_per_rank(model, Layout(global_batch=1))[0].activation_parts
    plan = build_plan(schedule, pp, m, v)
    per_stage = [3 * one.per_layer + (one.embedding if s == 0 else 0)
                 + (one.output + one.logits if s == lay.stages - 1 else 0)
                 for s in range(lay.stages)]
    expected = activation_bytes(plan, per_stage)
    ests = memory_per_rank(model, lay)
    assert tuple(e.activation_parts.total - e.activation_parts.working
                 for e in ests) == expected
    # backward's working set on the last stage: one microbatch's fp32 logits gradient
    (last,) = [e for e in ests if lay.stages - 1 in e.stages]
    assert last.activation_parts.working == 4 * model.seq_len * model.vocab
    if v == 1:
        assert tuple(sum(e.activation_parts.in_flight) for e in ests) == peak_in_flight(plan)
    if schedule == "1F1B":   # rank r holds p - r; the last stage one microbatch: logits once
        assert [e.activation_parts.in_flight for e in ests] == [(4,), (3,), (2,), (1,)]
        assert ests[-1].activation_parts.logits == one.logits
    if schedule == "GPipe":  # every forward before any backward: the loss graphs of all m
        assert ests[-1].activation_parts.logits == m * one.logits


def test_no_pipeline_holds_one_microbatch() -> None:
    m = PRESETS["llama3-8b"]
    est = memory_per_gpu(m, Layout(global_batch=16, micro_batch=2))
    parts = est.activation_parts
    assert parts.in_flight == (1,) and parts.stage_layers == (32,)
    assert parts.layers == 32 * parts.per_layer
    assert parts.per_layer == layer_activation_nbytes(m, Layout(global_batch=16, micro_batch=2))
    tokens = 2 * m.seq_len
    assert parts.embedding == 8 * tokens
    assert parts.output == 2 * 2 * tokens * m.hidden
    assert parts.logits == (4 + 2) * tokens * m.vocab


def test_zero3_gathers_units_and_fsdp_mixed_keeps_16_bit_copies() -> None:
    m = PRESETS["llama3-8b"]
    lay = Layout(dp=8, zero=3, global_batch=8, precision="fsdp-mixed")
    est = memory_per_gpu(m, lay)
    out = m.vocab * m.hidden + m.norm_params      # the output unit: output layer, final norm
    # at the peak (the loss's backward) the root units are gathered in 16 bits: the embedding
    # and the final norm with the output layer, no layer (resharded after forward)
    assert est.gathered == 2 * (out + m.vocab * m.hidden)
    # the states: fp32 shards, Adam's moments from the first step on
    assert est.params == 4 * est.states_held[0] // 4 and est.optimizer == est.states_held[2]
    # ZeRO 3 under mixed precision (DeepSpeed's): the fp32 master shard beside the 16-bit one
    mixed = memory_per_gpu(m, lay.with_(precision="mixed"))
    assert mixed.states_held[2] == 12 * est.states_held[2] // 8
    assert mixed.optimizer == pytest.approx(mixed.states_held[2], rel=1e-4)
    # DDP with autocast below ZeRO-3: a 16-bit copy of the weights it multiplies, and its
    # bucket buffers (a second copy of the fp32 gradients) from construction
    ddp = memory_per_gpu(m, lay.with_(zero=0))
    # (a request the allocator serves with a block too small to split takes all of it: the
    # replay's bytes are the requests' within a part in ten thousand)
    assert ddp.gathered > 0 and ddp.comm_buffers == pytest.approx(4 * m.params, rel=1e-4)
    assert memory_per_gpu(m, lay.with_(zero=0, precision="mixed")).gathered == 0
    assert memory_per_gpu(m, Layout(global_batch=2)).comm_buffers == 0


STATE_BYTES = [
    # (precision, ZeRO stage, bytes per parameter of (parameters, gradients, optimizer state),
    # "N" where that state is sharded over the N data-parallel ranks)
    # Rajbhandari et al. 2020 (ZeRO), Figure 1 and Section 5.1-5.3: mixed-precision Adam holds
    # 2 + 2 + K bytes a parameter, K = 12 (fp32 master copy, momentum, variance); P_os shards
    # the 12, P_os+g the 2 + 12, P_os+g+p all 16
    ("mixed", 0, (2, 2, 12), ()),
    ("mixed", 1, (2, 2, 12), ("optimizer",)),
    ("mixed", 2, (2, 2, 12), ("grads", "optimizer")),
    ("mixed", 3, (2, 2, 12), ("params", "grads", "optimizer")),
    # Megatron-LM docs/source/api-guide/dist_optimizer.md, bytes per parameter: bf16
    # parameters with fp32 gradients 18 without the distributed optimizer, 6 + 12/d with it;
    # fp32 parameters and gradients 16, and 8 + 8/d
    ("mixed-fp32-grads", 0, (2, 4, 12), ()),
    ("mixed-fp32-grads", 1, (2, 4, 12), ("optimizer",)),
    ("fp32", 0, (4, 4, 8), ()),
    ("fp32", 1, (4, 4, 8), ("optimizer",)),
    # torch FSDP2 (torch.distributed.fsdp.fully_shard, MixedPrecisionPolicy): the sharded
    # parameters keep their fp32 dtype (they are the optimizer's master copy; param_dtype=bf16
    # is the gathered compute copy only), gradients are sharded in the parameters' dtype, and
    # Adam's two fp32 moments: 4 + 4 + 8, all sharded
    ("fsdp-mixed", 3, (4, 4, 8), ("params", "grads", "optimizer")),
]


def _states_held(spec: ModelSpec, layout: Layout) -> tuple[dict[str, int], int]:
    """What one GPU's step program holds of each state: the parameters and optimizer state
    when the program ends (the fp32 master copy from the start, Adam's moments from the first
    step on), the gradients when the first optimizer step begins (every microbatch's reduced,
    none yet freed); and how many tensors the GPU holds (each shard rounds up by an
    element)."""
    from distlab.plan.activations import activation_options as options
    from distlab.plan.memory_program import ALLOCATED_PARTS
    from distlab.plan.memory_step import StepOptions, rank_units, step_program

    opt = StepOptions(options(layout, "flash", False, None, 1, False, False))
    program = step_program(spec, layout, 0, opt, steps=1)
    start = next(i for i, name in program.phases if name.endswith("optimizer"))
    live: dict[int, tuple[int, str]] = {}
    held = {}
    for i, (handle, nbytes, _, part) in enumerate(program.events):
        if i == start:
            held["grads"] = sum(n for n, p in live.values() if p == "grads")
        if part < 0:
            live.pop(handle, None)
        else:
            live[handle] = (nbytes, ALLOCATED_PARTS[part])
    for part in ("params", "optimizer"):
        held[part] = sum(n for n, p in live.values() if p == part)
    tensors = sum(len(u.tensors) + len(u.expert) for u in rank_units(spec, layout, 0))
    return held, tensors


@pytest.mark.parametrize(("precision", "zero", "nbytes", "sharded"), STATE_BYTES,
                         ids=[f"{p}-zero{z}" for p, z, _, _ in STATE_BYTES])
def test_state_bytes_per_parameter_by_precision_and_zero_stage(
        precision: str, zero: int, nbytes: tuple[int, int, int],
        sharded: tuple[str, ...]) -> None:
    """The bytes a GPU holds per parameter of each model state, by precision and ZeRO stage,
    as the sources in :data:`STATE_BYTES` count them: ZeRO 3 under mixed precision keeps the
    fp32 master copy (sharded) beside the 16-bit parameters, as stages 1 and 2 do; FSDP2's
    fp32 parameters are that copy, counted once. Each shard is ``ceil(elements / N)``: up to
    one element per tensor more than ``P / N``."""
    spec = ModelSpec("tiny", 2, 64, 4, 128, 16, gated_ffn=True)
    n = 4
    layout = Layout(dp=n, zero=zero, global_batch=n, precision=precision)
    held, tensors = _states_held(spec, layout)
    for part, per_param in zip(("params", "grads", "optimizer"), nbytes, strict=True):
        want = spec.params * per_param / (n if part in sharded else 1)
        assert want <= held[part] <= want + tensors * per_param, (part, held[part], want)


def test_gathered_logits_hold_the_whole_vocabulary_on_every_tp_rank() -> None:
    """A Hugging Face model under tensor parallelism (``vocab_parallel_loss=False``, the
    ``"hf"`` framework) gathers the logits before the loss: each rank keeps all ``v`` columns
    of the fp32 logits and the 16-bit ones beside, and backward holds their fp32 gradient,
    where a vocabulary-parallel loss keeps ``ceil(v / tp)``; without tensor parallelism the
    two are the same."""
    from distlab.plan.memory import FRAMEWORKS
    from distlab.transformer import model_spec

    m = model_spec("llama3-8b", seq_len=4096)
    lay = Layout(tp=8, sequence_parallel=True, global_batch=1)
    split = memory_per_gpu(m, lay, sp_saves_gathered=True)
    hf = memory_per_gpu(m, lay, **FRAMEWORKS["hf"])
    tokens = m.seq_len
    assert split.activation_parts.logits == tokens * -(-m.vocab // 8) * (4 + 2)
    assert hf.activation_parts.logits == tokens * m.vocab * (4 + 2)
    assert hf.activation_parts.working == tokens * m.vocab * 4     # the logits' fp32 gradient
    # the replay holds at least the whole fp32 logits and the 16-bit ones more than the split
    assert hf.allocated - split.allocated >= tokens * (m.vocab - m.vocab // 8) * (4 + 2)
    bound = memory_lower_bound(m, lay, **FRAMEWORKS["hf"])
    assert bound <= hf.total and bound > memory_lower_bound(m, lay, sp_saves_gathered=True)
    one = Layout(global_batch=1)
    assert memory_per_gpu(m, one, vocab_parallel_loss=False) == memory_per_gpu(m, one)


def test_parts_sum_to_the_total_and_fits_reads_the_gpu() -> None:
    m = PRESETS["llama3-70b"]
    lay = Layout(dp=4, tp=8, pp=2, zero=1, sequence_parallel=True, global_batch=32,
                 recompute="selective")
    hw = hardware("h100", 64)
    est = memory_per_gpu(m, lay, hw)
    assert isinstance(est, MemoryEstimate) and list(est.parts()) == list(PARTS) == [
        "params", "grads", "optimizer", "activations", "gathered", "comm_buffers", "working",
        "allocator", "device"]
    assert sum(est.parts().values()) == est.total == est.reserved + est.device
    assert est.device == DEVICE_BYTES + communicators(lay) * NCCL_COMMUNICATOR_BYTES
    assert communicators(lay) == 3
    assert memory_per_gpu(m, lay, device_bytes=0).device == 0
    assert est.headroom_bytes() == hw.gpu.memory_bytes - est.total
    assert est.fits() == (est.total <= hw.gpu.memory_bytes)
    assert est.headroom_bytes("h200") > est.headroom_bytes()
    small = GpuKind("small", est.total - 1, 1e12, "h100_sxm8", "test")
    assert not est.fits(small) and est.headroom_bytes(small) == -1
    bare = memory_per_gpu(m, lay)
    assert bare.fits(hardware("h100", 64)) and bare.gpu_memory_bytes is None
    with pytest.raises(ValueError, match="hw"):
        bare.fits()
    # the most loaded pipeline rank
    assert est.total == max(e.total for e in memory_per_rank(m, lay, hw))
    # expandable segments reserve what they map in whole pages
    exp = memory_per_gpu(m, lay, hw, expandable_segments=True)
    assert exp.expandable_segments
    assert exp.allocated == pytest.approx(est.allocated, rel=1e-4)


def test_presets_by_hand() -> None:
    # Llama 3 8B, seq 8192, flash, no dropout: per layer 2 bytes x (6.5 s h + 14 s h) where
    # 6.5 = norm inputs, QKV and first linear inputs, Q, output (6) and K, V at h / 4 each;
    # 14 = four s f tensors at f = 3.5 h; plus the log-sum-exp
    m = PRESETS["llama3-8b"]
    s, h = m.seq_len, m.hidden
    lay = Layout(global_batch=1)
    assert layer_activation_nbytes(m, lay) == 2 * (6 * s * h + 2 * s * m.kv_width
                                                   + 4 * s * m.ffn) + 4 * m.heads * s
    est = memory_per_gpu(m, lay)
    assert est.params == pytest.approx(2 * m.params, rel=1e-4)
    assert est.optimizer == pytest.approx(12 * m.params, rel=1e-4)
    assert est.states_held == (2 * m.params, 2 * m.params, 12 * m.params)


@pytest.mark.parametrize(("call", "match"), [
    (lambda: memory_per_gpu(GPT3, Layout(), attention="fused"), "attention"),
    (lambda: memory_per_gpu(GPT3, Layout(), mask_bytes=0), "mask_bytes"),
    (lambda: memory_per_gpu(GPT3, Layout(), dtype_bytes=0), "dtype_bytes"),
    (lambda: memory_per_gpu(GPT3, Layout(), bucket_mb=-1), "bucket_mb"),
    (lambda: memory_per_gpu(GPT3, Layout(), prefetch=-1), "prefetch"),
    (lambda: memory_per_gpu(GPT3, Layout(), optimizer="sgd"), "optimizer"),
    (lambda: memory_per_gpu(GPT3, Layout(), device_bytes=-1), "device_bytes"),
    (lambda: memory_per_gpu(GPT3, Layout(tp=5)), "layout.tp=5"),
    (lambda: memory_per_gpu(ModelSpec("m", 2, 96, 12, 64, 24, kv_heads=3), Layout(tp=2)),
     "layout.tp=2 must divide kv_heads=3"),
    (lambda: memory_per_gpu(GPT3, Layout(cp=3)), "layout.cp=3"),
    (lambda: memory_per_gpu(ModelSpec("m", 2, 64, 8, 64, 24), Layout(tp=8, cp=2,
                                                                     sequence_parallel=True)),
     "layout.tp=8 must divide seq_len / cp"),
    (lambda: memory_per_gpu(ModelSpec("m", 2, 64, 4, 64, 24), Layout(pp=3, global_batch=3)),
     "stages"),
    (lambda: memory_per_gpu(GPT3, Layout(pp=4, global_batch=2)), "microbatches"),
    (lambda: memory_per_gpu(GPT3, Layout(dp=2, global_batch=2), hardware("h100", 8)),
     "GPUs"),
    (lambda: memory_per_gpu("gpt5", Layout()), "model"),
    (lambda: layer_activation_terms(GPT3, 0), "micro_batch"),
])
def test_bad_input_names_the_argument(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


def test_wrong_types_are_type_errors() -> None:
    with pytest.raises(TypeError, match="layout"):
        memory_per_gpu(GPT3, {"dp": 1})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="dropout"):
        memory_per_gpu(GPT3, Layout(), dropout=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="hw"):
        memory_per_gpu(GPT3, Layout(), "h100")  # type: ignore[arg-type]


@pytest.mark.parametrize(("schedule", "v"), [("1F1B", 1), ("Interleaved1F1B", 2),
                                             ("InterleavedZeroBubble", 2), ("ZBVZeroBubble", 2),
                                             ("DualPipeV", 2)])
def test_a_shorter_plan_holds_the_same_peak(schedule: str, v: int) -> None:
    """The holdings of the whole plan equal those of the steady prefix the model builds."""
    from distlab.pipeline_parallel.schedules.registry import check_combination
    from distlab.plan.memory import _plan_holdings, steady_microbatches

    checked = 0
    for pp in (2, 3, 4, 8):
        for m in range(pp, 7 * pp + 1):
            try:
                check_combination(schedule, pp, m, v)
            except ValueError:
                continue
            short = steady_microbatches(schedule, pp, m)
            if short < m:
                checked += 1
                assert _plan_holdings(schedule, pp, m, v) == \
                    _plan_holdings(schedule, pp, short, v), (pp, m)
    assert checked > 0


def test_per_op_checkpointing_keeps_what_torchtitans_policy_saves() -> None:
    """torchtitan's ``_save_list`` policy on a Llama layer (wq, wk, wv, wo, w1, w3, w2 in
    forward order; every second ``mm`` recomputed): the layer's input, wq's, wv's, w1's and
    w2's outputs, the flash kernel's output and fp32 log-sum-exp; at tp 8 with sequence
    parallelism the column outputs and the input divide by 8, w2's local output stays whole
    and both reduce-scatters' outputs are kept."""
    m = PRESETS["llama3-8b"]
    s, h, k, f, a = m.seq_len, m.hidden, m.kv_width, m.ffn, m.heads
    lay = Layout(dp=8, micro_batch=2, global_batch=16, recompute="op")
    tokens = 2 * s
    want = tokens * (2 * (h + h + k + f + h + h) + 4 * a)
    assert layer_activation_nbytes(m, lay) == want
    tp = lay.with_(dp=1, tp=8, sequence_parallel=True, global_batch=2)
    # kv_heads 8 = tp: one key/value head per GPU
    want_tp = tokens * (2 * (h + h + k + f + h + 2 * h) // 8 + 2 * h + 4 * a // 8)
    assert layer_activation_nbytes(m, tp) == want_tp
    none = layer_activation_nbytes(m, lay.with_(recompute="none"))
    full = layer_activation_nbytes(m, lay.with_(recompute="full"))
    assert full < want < none
