"""The tensors one GPU of a layout allocates and frees in a training step, written as a
:class:`~distlab.plan.memory_program.Program` (what each is and why is in that module's
docstring): :func:`step_program`.

The program covers two optimizer steps (the first creates Adam's moments where the allocator
finds room, the second shows what that did to the next forward's vocabulary-sized tensors) and,
per step, the microbatches that matter: one that creates the gradients and one that
accumulates into them (more repeat the second), or, under a pipeline schedule, the rank's
actions in the schedule's order up to its steady state
(:func:`~distlab.plan.memory.steady_microbatches`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from distlab.pipeline_parallel.actions import Kind
from distlab.pipeline_parallel.schedules.registry import build_plan
from distlab.plan.activations import (
    INDEX_BYTES,
    LOSS_BYTES,
    ActivationOptions,
    backward_working_tensors,
    edge_nbytes,
    forward_transient_tensors,
    layer_kept_tensors,
    loss_vocab,
    norm_stats_nbytes,
)
from distlab.plan.experts import dispatch_buffers, moe_kept_tensors
from distlab.plan.layout import PRECISIONS, Layout
from distlab.plan.memory_program import Program, chunks
from distlab.plan.partition import (
    layer_params_per_gpu,
    layers_per_stage,
    moe_layer_params_per_gpu,
    rank_stages,
)
from distlab.recompute import NONE, Again
from distlab.transformer import ModelSpec, layer_linears

__all__ = ["OPTIMIZERS", "STEADY_ROUNDS", "STYLES", "StepOptions", "Unit", "rank_units",
           "steady_microbatches", "step_program", "style"]

OPTIMIZERS = ("fused", "foreach")
"""AdamW's implementation (:mod:`distlab.plan.memory_program`: a foreach step allocates an
fp32 temporary the size of the parameters)."""

STYLES = ("fsdp", "ddp", "megatron")
"""How a layout's states are held (:func:`style`)."""


def style(layout: Layout) -> str:
    """``"fsdp"`` for ZeRO 3 (FSDP2 gathers and reduce-scatters per unit), ``"megatron"`` for
    ZeRO 0-2 with 16-bit parameters (``"mixed"``, ``"mixed-fp32-grads"``: Megatron-LM's buffers),
    ``"ddp"`` for ZeRO 0-2 with fp32 parameters (torch DDP, autocast at ``"fsdp-mixed"``)."""
    if layout.zero == 3:
        return "fsdp"
    return "megatron" if layout.precision in ("mixed", "mixed-fp32-grads") else "ddp"


@dataclass(frozen=True)
class StepOptions:
    """The program's choices: the activation model's (:class:`~distlab.plan.activations.
    ActivationOptions`), the optimizer (:data:`OPTIMIZERS`), the data-parallel bucket in MiB
    (Megatron-LM's and DeepSpeed's bucket in flight at ZeRO 2) and FSDP's backward prefetch
    (units gathered ahead)."""

    activation: ActivationOptions
    optimizer: str = "fused"
    bucket_mb: float = 25.0
    prefetch: int = 1


@dataclass(frozen=True)
class Unit:
    """The parameters one GPU holds of one FSDP unit (the embedding, a layer, the final norm
    with the output layer): ``tensors``, elements of each parameter tensor before ZeRO
    sharding, in the order the optimizer creates their state; ``stage`` its pipeline stage;
    ``layer`` its layer index within the stage (``None`` for the embedding and final units);
    ``expert``: an MoE layer's routed experts on this GPU, one tensor per grouped weight (ZeRO
    shards them over the expert-data-parallel ranks), empty elsewhere; ``moe``: the unit is an
    MoE layer."""

    name: str
    tensors: tuple[int, ...]
    stage: int
    layer: int | None = None
    expert: tuple[int, ...] = ()
    moe: bool = False

    @property
    def elements(self) -> int:
        """Every element of the unit on this GPU."""
        return sum(self.tensors) + sum(self.expert)


def _layer_tensors(spec: ModelSpec, tp: int) -> tuple[int, ...]:
    """One layer's parameter tensors on one GPU in the order a torch module registers them
    (torchtitan's and :class:`~distlab.plan.verify.decoder.Block`'s: the attention norm, Q, K,
    V, the output projection, the MLP norm, the MLP's first, last and (gated) up matrices;
    each matrix split as Megatron-LM splits it, biases with their matrix)."""
    kv_local = spec.kv_width // tp if spec.kv % tp == 0 else spec.head_width
    mats = {}
    for lin in layer_linears(spec):
        if lin.name in ("k", "v"):
            mats[lin.name] = spec.hidden * kv_local
        else:
            mats[lin.name] = lin.in_features * lin.out_features // tp
    split, replicated = layer_params_per_gpu(spec, tp)
    biases = split + replicated - sum(mats.values()) - 2 * spec.norm_params
    if spec.gated_ffn:
        mlp = [mats["gate"], mats["down"], mats["up"]]
    else:
        mlp = [mats["first MLP linear"], mats["second MLP linear"]]
    attention = [mats["q"], mats["k"], mats["v"], mats["output projection"]]
    attention[0] += biases   # the biases, whichever they are, counted with Q
    return (spec.norm_params, *attention, spec.norm_params, *mlp)


def _moe_layer_tensors(spec: ModelSpec, layout: Layout) -> tuple[tuple[int, ...],
                                                                  tuple[int, ...]]:
    """One MoE layer's tensors on one GPU: the attention's and norms' as a dense layer's, then
    the router and the shared experts (one tensor each); and the routed experts' grouped
    weights (gate/up and down, or first and second), ``experts / ep`` of them split over
    ``etp``."""
    dense = _layer_tensors(spec, layout.tp)
    mlp = 3 if spec.gated_ffn else 2
    split, replicated, expert = moe_layer_params_per_gpu(spec, layout.tp, layout.ep,
                                                         layout.expert_tp)
    head = dense[:len(dense) - mlp]
    rest = split + replicated - sum(head)
    shared = rest - spec.router_params
    tensors = (*head, spec.router_params) + ((shared,) if shared else ())
    first = expert * (mlp - 1) // mlp
    return tensors, (first, expert - first)


def rank_units(spec: ModelSpec, layout: Layout, pp_rank: int) -> tuple[Unit, ...]:
    """The units of pipeline rank ``pp_rank``, in forward order (stage by stage: its embedding,
    its layers, its final norm and output layer)."""
    tp = layout.tp
    split = layers_per_stage(spec.layers, layout.stages)
    vocab_rows = -(-spec.vocab // tp) * spec.hidden
    stages = rank_stages(layout, pp_rank)
    layer = _layer_tensors(spec, tp)
    moe_layer, expert = _moe_layer_tensors(spec, layout) if spec.moe else ((), ())
    out: list[Unit] = []
    for s in stages:
        if s == 0:
            emb = (vocab_rows,) + (((spec.positions or 0) * spec.hidden,) if spec.positions
                                   else ())
            out.append(Unit("embedding", emb, s))
        start = sum(split[:s])
        out += [Unit(f"layer {s}.{i}", moe_layer, s, i, expert, True)
                if spec.is_moe_layer(start + i) else Unit(f"layer {s}.{i}", layer, s, i)
                for i in range(split[s])]
        if s == layout.stages - 1:
            tensors = [spec.norm_params]
            if not spec.tied_embeddings or 0 not in stages:
                tensors.append(vocab_rows)
            out.append(Unit("final", tuple(tensors), s))
    return tuple(out)


@dataclass(frozen=True)
class _Sizes:
    """Bytes per microbatch on one GPU the program allocates, tensor by tensor, from the
    activation model."""

    tokens: int
    kept: tuple[int, ...]              # one layer, recompute applied, its norms' statistics
    whole: tuple[int, ...]             # one layer without recompute (full recompute's again)
    forward_transient: tuple[int, ...]
    backward_working: tuple[int, ...]
    output_kept: int                   # the final norm's and the output layer's inputs
    vocab: int                         # the loss's vocabulary columns here (loss_vocab)
    moe_kept: tuple[int, ...] = ()     # what an MoE layer keeps beyond a dense one
    moe_whole: tuple[int, ...] = ()    # the same without recompute
    dispatch: tuple[int, ...] = ()     # an MoE layer's dispatch buffers while it runs


def _sizes(spec: ModelSpec, layout: Layout, opt: ActivationOptions, amp: bool) -> _Sizes:
    tokens = (spec.seq_len // layout.cp) * layout.micro_batch
    seq_split = layout.tp if layout.sequence_parallel else 1
    # under autocast the residual stream stays fp32: the layer's input (and, kept, the MLP
    # norm's input) take 4 bytes an element where the model counts the activation dtype; and
    # autocast casts a norm's fp32 output to 16 bits once for each linear that reads it, each
    # linear keeping its own copy (Q, K and V: three; a gated MLP's two first linears: two)
    extra = tokens * spec.hidden * (4 - opt.dtype_bytes) // seq_split if amp else 0
    casts = (2 + (1 if spec.gated_ffn else 0)) if amp else 0
    cast = tokens * spec.hidden * opt.dtype_bytes

    def with_stats(lay: Layout) -> tuple[int, ...]:
        kept = list(layer_kept_tensors(spec, lay, opt))
        stats = norm_stats_nbytes(spec, lay)
        if stats:
            kept += [stats // 2, stats // 2]
        if extra:
            kept += [extra] * (1 if lay.recompute_policy.keeps_input_only else 2)
        if casts and not lay.recompute_policy.recomputes:
            kept += [cast] * casts
        return tuple(kept)

    _, output, _ = edge_nbytes(spec, layout, opt)
    d = opt.dtype_bytes
    return _Sizes(tokens, with_stats(layout), with_stats(layout.with_(recompute=NONE)),
                  forward_transient_tensors(spec, layout, opt),
                  backward_working_tensors(spec, layout, opt), output,
                  loss_vocab(spec, layout, opt),
                  moe_kept_tensors(spec, layout, opt),
                  moe_kept_tensors(spec, layout.with_(recompute=NONE), opt),
                  dispatch_buffers(spec, layout, d))


@lru_cache(maxsize=256)
def _plan(schedule: str, pp: int, microbatches: int, stages_per_rank: int) -> Any:
    return build_plan(schedule, pp, microbatches, stages_per_rank)


class _Writer:
    """Writes one GPU's program (the module docstring of :mod:`.memory_program`)."""

    def __init__(self, spec: ModelSpec, layout: Layout, pp_rank: int, opt: StepOptions) -> None:
        self.spec, self.layout, self.opt = spec, layout, opt
        self.p = Program()
        self.pp_rank = pp_rank
        self.style = style(layout)
        self.units = rank_units(spec, layout, pp_rank)
        self.stages = rank_stages(layout, pp_rank)
        self.first = 0 in self.stages
        self.last = layout.stages - 1 in self.stages
        self.n = layout.dp * layout.cp
        self.ne = layout.expert_dp
        self.p_b, self.g_b, self.o_b = PRECISIONS[layout.precision]
        self.compute_b = 4 if layout.precision == "fp32" else 2
        self.amp = layout.precision == "fsdp-mixed" and self.style == "ddp"
        self.sz = _sizes(spec, layout, opt.activation, self.amp)
        self.reshard = self.style == "fsdp" and layout.pp == 1
        self.grads: dict[str, int] = {}       # unit -> handle of its gradient (or shard)
        self.gathered: dict[str, int] = {}    # unit -> handle of its unsharded parameters
        self.moments_made = False
        self.step = 0

    # -- states -------------------------------------------------------------------------
    def shard(self, elements: int, sharded: bool) -> int:
        return -(-elements // self.n) if sharded else elements

    def shard_expert(self, elements: int, sharded: bool) -> int:
        return -(-elements // self.ne) if sharded else elements

    def shard_unit(self, u: Unit, sharded: bool) -> int:
        """Elements of ``u``'s shard: its experts over the expert-data-parallel ranks."""
        return (self.shard(sum(u.tensors), sharded)
                + self.shard_expert(sum(u.expert), sharded))

    def build(self) -> None:
        p, z = self.p, self.layout.zero
        p.phase("build")
        for u in self.units:
            for t in u.tensors:
                p.alloc("params", self.shard(t, z == 3) * self.p_b)
            for t in u.expert:
                p.alloc("params", self.shard_expert(t, z == 3) * self.p_b)
        total = sum(u.elements for u in self.units)
        dense = sum(sum(u.tensors) for u in self.units)
        experts = total - dense
        if self.style == "megatron":
            p.alloc("grads", (self.shard(dense, z >= 2) + self.shard_expert(experts, z >= 2))
                    * self.g_b)                                              # the grad buffer
        master = self.o_b - 8       # the optimizer state beyond Adam's two fp32 moments
        if master > 0:
            # the fp32 master copy of 16-bit parameters, whichever holds it (Megatron-LM's
            # optimizer; DeepSpeed's ZeRO 1-3), sharded from ZeRO 1 on; none where the
            # parameters are fp32 themselves ("fsdp-mixed", "fp32": o_b is the moments' 8)
            p.alloc("optimizer", (self.shard(dense, z >= 1)
                                  + self.shard_expert(experts, z >= 1)) * master)
        if self.style == "ddp" and self.n > 1:
            # DDP's bucket buffers: one flat copy of every gradient, from construction
            p.alloc("comm_buffers", total * self.g_b)

    def optimizer_step(self, step: int) -> None:
        p, z = self.p, self.layout.zero
        p.phase(f"step {step} optimizer")
        sharded = sum(self.shard_unit(u, z >= 1) for u in self.units)
        if not self.moments_made:
            for u in self.units:
                for t in u.tensors:
                    for _ in range(2):                  # exp_avg, exp_avg_sq
                        p.alloc("optimizer", self.shard(t, z >= 1) * 4)
                for t in u.expert:
                    for _ in range(2):
                        p.alloc("optimizer", self.shard_expert(t, z >= 1) * 4)
            self.moments_made = True
        if self.opt.optimizer == "foreach":
            p.transient("working", sharded * 4)
        if self.style != "megatron":                 # zero_grad(set_to_none=True)
            for h in self.grads.values():
                p.free(h)
            self.grads.clear()

    # -- FSDP ---------------------------------------------------------------------------
    def gather(self, unit: Unit) -> None:
        if self.style != "fsdp" or unit.name in self.gathered:
            return
        p, el = self.p, unit.elements
        copy_in = p.alloc("comm_buffers", self.shard_unit(unit, True) * self.compute_b,
                          "all_gather_copy_in")
        out = p.alloc("comm_buffers", el * self.compute_b, "all_gather")
        p.free(copy_in)
        self.gathered[unit.name] = p.alloc("gathered", el * self.compute_b)
        p.free(out)

    def release(self, unit: Unit) -> None:
        self.p.free(self.gathered.pop(unit.name, -1))

    def reduce(self, unit: Unit, unsharded_grad: int, pending: list[int]) -> None:
        """FSDP2's post-backward of ``unit``: copy into the fp32 reduce-scatter input, reduce
        into the output that becomes (or adds to) the sharded gradient, in the sharded
        parameters' gradient dtype (FSDP2 casts it to the parameter's dtype: fp32 at
        ``"fsdp-mixed"``; the precision's 16-bit gradient at ``"mixed"``, DeepSpeed ZeRO 3's
        ``2 + 2 + 12``)."""
        p, el = self.p, unit.elements
        rs_in = p.alloc("comm_buffers", el * 4)
        p.free(unsharded_grad)
        out = p.alloc("grads" if unit.name not in self.grads else "comm_buffers",
                      self.shard_unit(unit, True) * self.g_b, "reduce_scatter")
        if unit.name not in self.grads:
            self.grads[unit.name] = out
        else:
            p.free(out)
        for h in pending:
            p.free(h)
        pending[:] = [rs_in]

    # -- one microbatch without a pipeline ------------------------------------------------
    def microbatch(self) -> None:
        p, sz, lay = self.p, self.sz, self.layout
        layers = [u for u in self.units if u.layer is not None]
        roots = [u for u in self.units if u.layer is None]
        ids = p.alloc("activations", 2 * sz.tokens * INDEX_BYTES)      # ids and targets
        for u in roots:
            self.gather(u)
        kept: list[int] = []
        copies: list[int] = []
        for u in layers:
            self.gather(u)
            if self.amp:
                copies.append(p.alloc("gathered", u.elements * self.compute_b))
            kept.append(p.alloc_all("activations", sz.kept + (sz.moe_kept if u.moe else ())))
            if u.moe:
                p.transients("comm_buffers", sz.dispatch)
            p.transients("working", sz.forward_transient)
            if self.reshard:
                self.release(u)
        if self.amp and lay.recompute_policy.keeps_input_only:
            for h in copies:               # the autocast cache, cleared when forward ends
                p.free(h)
            copies = []
        out = p.alloc("activations", sz.output_kept)
        p.phase(self._phase("loss"))
        logsm = self.loss_forward()
        p.phase(self._phase("backward"))
        self.loss_backward(logsm)
        p.free(out)
        root_grads = [self.unit_grad(u) for u in roots]
        pending: list[int] = []
        for i in range(len(layers) - 1, -1, -1):
            u = layers[i]
            self.gather(u)
            if self.reshard and self.opt.prefetch and i > 0:
                self.gather(layers[i - 1])
            recomputed = self.recompute(u)
            p.transients("working", sz.backward_working)
            grad = self.unit_grad(u)
            p.free_all(recomputed)
            p.free_all(kept[i])
            if copies:
                p.free(copies[i])
            if self.style == "fsdp":
                self.reduce(u, grad, pending)
            if self.reshard:
                self.release(u)
        for u, g in zip(roots, root_grads, strict=True):
            if self.style == "fsdp":
                self.reduce(u, g, pending)
            self.release(u)
        for h in pending:
            p.free(h)
        p.free(ids)

    def _phase(self, what: str) -> str:
        return f"step {self.step} {what}"

    def recompute(self, u: Unit) -> list[int]:
        """What backward allocates again for ``u`` (handles): the whole layer under full
        recompute (and autocast's weight copies), what the layer did not keep under per-op
        recompute."""
        p, again, sz = self.p, self.layout.recompute_policy.again, self.sz
        if again is Again.LAYER:
            if self.amp:
                p.transient("gathered", u.elements * self.compute_b)
            return p.alloc_all("activations", sz.whole + (sz.moe_whole if u.moe else ()))
        if again is Again.UNSAVED_PRODUCTS:
            missing = max(0, sum(sz.whole) - sum(sz.kept))
            return p.alloc_all("activations", chunks(missing, list(sz.whole)))
        return []

    def unit_grad(self, u: Unit) -> int:
        """The gradient autograd writes for ``u``: FSDP's unsharded 16-bit gradient (handle
        returned, reduced by :meth:`reduce`), DDP's ``.grad`` tensors (kept until
        ``zero_grad``), nothing for Megatron-LM (its buffer exists)."""
        if self.style == "fsdp":
            return self.p.alloc("grads", u.elements * self.compute_b)
        if self.style == "ddp" and u.name not in self.grads:
            self.grads[u.name] = self.p.alloc("grads", u.elements * self.g_b)
        return -1

    def accumulated_grad(self, u: Unit) -> int:
        """The gradient a stage accumulates over a pipeline's microbatches: FSDP2 keeps the
        unsharded gradient in its reduce dtype (fp32; ``to_accumulated_grad_if_needed``) until
        the last microbatch reduces it; DDP its ``.grad``."""
        if self.style == "fsdp":
            return self.p.alloc("grads", u.elements * 4)
        return self.unit_grad(u)

    def loss_forward(self) -> int:
        p, sz = self.p, self.sz
        tv = sz.tokens * sz.vocab
        lp = p.alloc("working", tv * self.compute_b) if self.compute_b != LOSS_BYTES else -1
        fp32 = p.alloc("working", tv * LOSS_BYTES)
        logsm = p.alloc("activations", tv * LOSS_BYTES)
        p.free(fp32)
        p.free(lp)
        return logsm

    def loss_backward(self, logsm: int) -> None:
        p, sz = self.p, self.sz
        tv = sz.tokens * sz.vocab
        grad_ls = p.alloc("working", tv * LOSS_BYTES)
        grad_in = p.alloc("working", tv * LOSS_BYTES)
        p.free(grad_ls)
        p.free(logsm)
        if self.compute_b != LOSS_BYTES:
            p.transient("working", tv * self.compute_b)
        p.free(grad_in)

    # -- a pipeline rank ------------------------------------------------------------------
    def pipeline(self, microbatches: int) -> None:
        p, sz, lay = self.p, self.sz, self.layout
        plan = _plan(lay.schedule, lay.pp, microbatches, lay.stages_per_rank)
        by_stage: dict[int, list[Unit]] = {}
        for u in self.units:
            by_stage.setdefault(u.stage, []).append(u)
        split = layers_per_stage(self.spec.layers, lay.stages)
        for u in self.units:
            self.gather(u)                     # FSDP under a pipeline: gathered for the step
        held: dict[tuple[int, int], list[int]] = {}
        grads: dict[int, list[int]] = {}
        for a in plan.compute(self.pp_rank):
            s, mb = a.stage, a.microbatch
            last = s == lay.stages - 1
            if a.kind is Kind.FORWARD:
                hs = []
                if s == 0 or last:
                    hs.append(p.alloc("activations", sz.tokens * INDEX_BYTES))
                n_layers = split[s]
                if self.amp:
                    hs.append(p.alloc("gathered", sum(u.elements for u in by_stage[s])
                                      * self.compute_b))
                n_moe = sum(u.moe for u in by_stage[s])
                hs.append(p.alloc("activations", n_layers * sum(sz.kept)
                                  + n_moe * sum(sz.moe_kept)))
                if n_moe:
                    p.transients("comm_buffers", sz.dispatch)
                p.transients("working", sz.forward_transient)
                if last:
                    hs.append(p.alloc("activations", sz.output_kept))
                    hs.append(self.loss_forward())
                held[(s, mb)] = hs
            elif a.kind in (Kind.FULL_BACKWARD, Kind.BACKWARD_INPUT):
                hs = held.get((s, mb), [])
                if last and hs:
                    self.loss_backward(hs.pop())
                if s not in grads and self.style != "megatron":
                    grads[s] = [self.accumulated_grad(u) for u in by_stage[s]]
                if self.style == "fsdp":
                    # this microbatch's 16-bit gradients, added into the fp32 accumulators
                    p.transient("grads", sum(u.elements for u in by_stage[s]) * self.compute_b)
                r = self.recompute(by_stage[s][0])
                p.transients("working", sz.backward_working)
                p.free_all(r)
                if a.kind is Kind.FULL_BACKWARD or not plan.splits_backward:
                    for h in held.pop((s, mb), []):
                        p.free(h)
            elif a.kind is Kind.BACKWARD_WEIGHT:
                for h in held.pop((s, mb), []):
                    p.free(h)
        for hs in held.values():
            for h in hs:
                p.free(h)
        pending: list[int] = []
        for s, gs in grads.items():
            for u, g in zip(by_stage[s], gs, strict=True):
                if self.style == "fsdp":
                    self.reduce(u, g, pending)
        for h in pending:
            p.free(h)
        for u in self.units:
            self.release(u)

    def write(self, steps: int, microbatches: int) -> Program:
        self.build()
        for step in range(steps):
            self.step = step
            self.p.phase(self._phase("forward"))
            if self.layout.pp > 1:
                self.pipeline(microbatches)
            else:
                for _ in range(microbatches):
                    self.p.phase(self._phase("forward"))
                    self.microbatch()
            self.optimizer_step(step)
        return self.p


STEADY_ROUNDS = 4
"""Microbatches past ``STEADY_ROUNDS * pp`` change no rank's holdings (what it holds at its
peak) in the schedules that run in rounds of ``pp``: their steady state repeats. Checked
against the whole plan for every schedule torch accepts with pp 2-16 and up to 10 pp
microbatches (``tests/plan/test_plan_memory.py``)."""


def steady_microbatches(schedule: str, pp: int, microbatches: int) -> int:
    """The microbatches :func:`step_program` and the memory model's holdings build the plan
    for: ``microbatches`` for GPipe and LoopedBFS (every forward before the backwards: holdings
    grow with ``m``) and for an interleaved schedule whose rounds are not ``pp`` long; else at
    most ``STEADY_ROUNDS * pp``."""
    if schedule in ("GPipe", "LoopedBFS") or (schedule.startswith("Interleaved")
                                               and microbatches % pp):
        return microbatches
    return min(microbatches, STEADY_ROUNDS * pp)




def step_program(spec: ModelSpec, layout: Layout, pp_rank: int, opt: StepOptions, *,
                 steps: int = 2, microbatches: int | None = None) -> Program:
    """The :class:`~distlab.plan.memory_program.Program` of one GPU of pipeline rank
    ``pp_rank``: ``steps`` optimizer steps of ``microbatches`` microbatches each (default: at
    most two without a pipeline, the schedule's steady state with one)."""
    if microbatches is None:
        m = layout.microbatches
        microbatches = (min(m, 2) if layout.pp == 1
                        else steady_microbatches(layout.schedule, layout.pp, m))
    return _Writer(spec, layout, pp_rank, opt).write(steps, microbatches)
