"""A training step's memory as the GPU sees it: every tensor one GPU allocates and frees, in
order, replayed through torch's caching allocator.

:func:`build_program` writes the step of one GPU (one pipeline rank) of a layout as a
:class:`Program`: requests and frees of tensors, each labelled with the part it belongs to
(:data:`ALLOCATED_PARTS`) and the CUDA stream it is allocated on, for two optimizer steps (the
first creates the optimizer state, the second shows where it landed). :func:`run_program`
replays it through :class:`~distlab.plan.allocator.CachingAllocator`: the most bytes allocated
at once with each part's share at that moment, the phase it happened in, and the most bytes the
allocator reserved. Bytes everywhere; a request is rounded as the allocator rounds it.

What one step allocates (the tensors, their sizes and their order), by mechanism:

- **States.** Parameters, gradients and optimizer state in the layout's precision
  (:data:`~distlab.plan.layout.PRECISIONS`), sharded as ZeRO says (``zero_memory``); the
  parameters, Megatron-LM's gradient buffer and the fp32 master copy of 16-bit parameters
  (Megatron-LM's, and DeepSpeed's at every ZeRO stage, 3 included) exist from the start; Adam's
  two moments are created by the first ``optimizer.step`` (torch's AdamW creates them lazily,
  one pair per parameter tensor, in parameter order). A ``"foreach"`` AdamW allocates one fp32
  temporary the size of the GPU's parameters during the step (``torch._foreach_sqrt`` of the
  second moments); a fused one none.
- **FSDP2** (ZeRO 3, ``fully_shard`` per block and at the root; torch's
  ``_fsdp_collectives.py``): each unit's all-gather copies its 16-bit shard into a buffer
  (all-gather copy-in stream), gathers into an output (all-gather stream), copies out into the
  unit's unsharded parameters (default stream); after its forward the unit is resharded (freed),
  the root unit (embedding, final norm, output layer) only after the backward. In backward the
  next unit is prefetched; autograd writes the unit's 16-bit gradients, which are copied into
  an fp32 reduce-scatter input (default stream, kept until the next unit's reduce-scatter) and
  reduced into an output on the reduce-scatter stream that becomes the sharded gradient, in
  the precision's gradient dtype (``set_to_none`` left none before). Under a pipeline
  schedule the stage stays gathered and its 16-bit gradients accumulate until the last
  microbatch.
- **torch DDP with autocast** (ZeRO 0-2 at ``"fsdp-mixed"``): fp32 parameters, autocast's bf16
  copy of every weight a layer multiplies (cached for the forward, then kept by autograd until
  the layer's backward), the residual stream in fp32 (the embedding's output and every sum with
  it stay fp32), fp32 ``.grad`` tensors written during backward, and DDP's flat bucket buffers,
  one more copy of the gradients, from construction.
- **Megatron-LM** (``"mixed"``, ``"mixed-fp32-grads"``): 16-bit parameters, one contiguous
  gradient buffer and the fp32 master copy from the start; the reduce-scatter and the all-gather
  of the distributed optimizer run in place.
- **Activations.** Each layer keeps :func:`~distlab.plan.memory.layer_activation_nbytes` per
  microbatch (recompute applied) plus its norms' fp32 statistics, from its forward to its
  backward; the first stage keeps the token ids, the last the final norm's and output layer's
  inputs. Under recompute, backward allocates again what the layer did not keep (the whole
  layer under full recompute) while it runs its backward.
- **Transients.** A layer's forward holds, beyond what it keeps, its largest working set (three
  ``s b f`` tensors of a gated MLP under recompute, whose intermediate results are not kept; two
  norm temporaries otherwise); its backward holds the gradients of its activations at their
  largest (three ``s b f`` and two ``s b h`` tensors of a gated MLP, or FlashAttention's
  backward: its output gradients and an fp32 accumulator). Sequence parallelism's all-gathered
  inputs, when not kept, are a transient of forward and backward.
- **The loss** (last stage): the 16-bit logits, their fp32 copy and the fp32 log-softmax
  cross entropy keeps; in backward its gradient, the log-softmax's input gradient and the 16-bit
  gradient, each ``s b v / tp`` elements.

Pipeline stages run their actions in the schedule's order (:mod:`distlab.pipeline_parallel`),
each stage's activations held from its forward to the backward that releases them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from distlab.plan.allocator import CachingAllocator

__all__ = ["ALLOCATED_PARTS", "STREAMS", "Program", "ProgramPeak", "run_program"]

ALLOCATED_PARTS = ("params", "grads", "optimizer", "activations", "gathered", "comm_buffers",
                   "working")
"""What an allocated tensor belongs to: model states (``params``, ``grads``, ``optimizer``),
activations kept for backward, FSDP's gathered parameters or autocast's 16-bit weight copies
(``gathered``), collective buffers (``comm_buffers``), and transients (``working``: a layer's
working set, the loss's vocabulary-sized tensors, the optimizer's temporaries)."""

STREAMS = {"default": 0, "all_gather_copy_in": 1, "all_gather": 2, "reduce_scatter": 3}
"""The CUDA streams tensors are allocated on (the allocator keeps a cache per stream)."""


@dataclass
class Program:
    """An ordered list of requests and frees. ``events`` holds ``(handle, nbytes, stream,
    part)`` for a request and ``(handle, 0, 0, -1)`` for a free; ``phases`` the index of the
    event each named phase starts at."""

    events: list[tuple[int, int, int, int]] = field(default_factory=list)
    phases: list[tuple[int, str]] = field(default_factory=list)
    _next: int = 0

    def alloc(self, part: str, nbytes: int, stream: str = "default") -> int:
        """Request ``nbytes`` (nothing for ``nbytes <= 0``: handle ``-1``) for ``part``; the
        handle frees it."""
        if nbytes <= 0:
            return -1
        self._next += 1
        self.events.append((self._next, int(nbytes), STREAMS[stream],
                            ALLOCATED_PARTS.index(part)))
        return self._next

    def free(self, handle: int) -> None:
        """Free a handle of :meth:`alloc` (``-1``: nothing)."""
        if handle >= 0:
            self.events.append((handle, 0, 0, -1))

    def transient(self, part: str, nbytes: int, stream: str = "default") -> None:
        """A request freed at once (a working set that comes and goes)."""
        self.free(self.alloc(part, nbytes, stream))

    def alloc_all(self, part: str, sizes: Iterable[int], stream: str = "default") -> list[int]:
        """One request per size, in order; their handles."""
        return [self.alloc(part, n, stream) for n in sizes]

    def free_all(self, handles: Iterable[int]) -> None:
        """Free every handle, in order."""
        for h in handles:
            self.free(h)

    def transients(self, part: str, sizes: Iterable[int]) -> None:
        """Tensors held at once, then freed (a working set at its largest)."""
        self.free_all(self.alloc_all(part, sizes))

    def phase(self, name: str) -> None:
        """What follows belongs to phase ``name`` (``"step 1 backward"``)."""
        self.phases.append((len(self.events), name))

    def phase_at(self, index: int) -> str:
        """The phase event ``index`` belongs to."""
        name = ""
        for start, n in self.phases:
            if start > index:
                break
            name = n
        return name


@dataclass(frozen=True)
class ProgramPeak:
    """What :func:`run_program` saw, bytes.

    Attributes:
        allocated: the most bytes allocated at once.
        parts: each of :data:`ALLOCATED_PARTS` at that moment.
        phase: the phase it happened in.
        reserved: the most bytes the allocator reserved.
        segments: segments it took from the device.
    """

    allocated: int
    parts: dict[str, int]
    phase: str
    reserved: int
    segments: int


def run_program(program: Program, *, expandable_segments: bool = False,
                capacity: int | None = None) -> ProgramPeak:
    """Replay ``program`` through a fresh caching allocator (the module docstring) that may
    reserve at most ``capacity`` bytes (``None``: no limit): at the limit it releases its cached
    segments and tries again, as torch's does, and raises
    :class:`~distlab.plan.allocator.OutOfMemory` where even that fails."""
    alloc = CachingAllocator(expandable_segments=expandable_segments, capacity=capacity)
    tally = [0] * len(ALLOCATED_PARTS)
    owner: dict[int, tuple[int, int]] = {}
    best, best_parts, best_at = -1, tally[:], 0
    malloc, free, live = alloc.malloc, alloc.free, alloc.live
    for i, (handle, nbytes, stream, part) in enumerate(program.events):
        if nbytes:
            malloc(handle, nbytes, stream)
            size = live[handle].size   # a block too small to split is taken whole
            tally[part] += size
            owner[handle] = (part, size)
            if alloc.allocated > best:
                best, best_parts, best_at = alloc.allocated, tally[:], i
        else:
            free(handle)
            p, size = owner.pop(handle)
            tally[p] -= size
    peaks = alloc.peaks()
    return ProgramPeak(max(best, 0), dict(zip(ALLOCATED_PARTS, best_parts, strict=True)),
                       program.phase_at(best_at), peaks.reserved, peaks.segments)


def chunks(total: int, sizes: list[int]) -> Iterator[int]:
    """``sizes`` scaled to sum to ``total`` (the last one takes the rounding)."""
    whole = sum(sizes)
    if whole <= 0:
        return
    done = 0
    for i, s in enumerate(sizes):
        part = total - done if i == len(sizes) - 1 else total * s // whole
        done += part
        yield part
