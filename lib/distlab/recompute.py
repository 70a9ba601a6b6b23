"""Activation recompute as policies: what a layer keeps from its forward for its backward, what
the backward runs again, and which tensor-parallel collectives that repeats.

A user names a policy by a string (``Layout(recompute="full")``, ``python -m distlab.plan
--recompute full``); :func:`recompute_policy` resolves it once, at the public boundary, into a
:class:`Recompute`, and every model below asks the policy instead of comparing names:

- :data:`NONE`: nothing recomputed, every tensor the backward reads is kept.
- :data:`SELECTIVE`: Megatron-LM's ``--recompute-granularity selective`` (Korthikanti et al.
  2022, "Reducing Activation Recomputation in Large Transformer Models", section 5): the
  attention's ``a s^2 b`` tensors (the softmax, its dropout mask and output) are dropped and the
  attention's ``s^2`` products run again in backward. A fused (flash) attention kernel keeps no
  such tensor, so there it only costs time.
- :data:`OP`: torchtitan's per-op selective activation checkpointing
  (``selective_ac_option = 'op'``, its ``_save_list``): each layer runs under
  ``torch.utils.checkpoint`` keeping its input, the outputs of its odd-numbered matrix products
  in forward order (:func:`~distlab.transformer.per_op_saved_linears`), the attention kernel's
  outputs and, with sequence parallelism, each reduce-scatter's output; backward runs the other
  products again (and, without sequence parallelism, the all-reduces between them).
- :data:`FULL`: each layer keeps its input only and runs its whole forward again in backward,
  its tensor-parallel collectives included.

What asks what: the activation models (:mod:`distlab.plan.activations`,
:mod:`distlab.tensor_parallel.memory`) read :attr:`Recompute.keeps`; the step time
(:mod:`distlab.plan.step`) :attr:`Recompute.again` and :meth:`Recompute.repeats_tp_forward`;
the memory program (:mod:`distlab.plan.memory_step`) what backward allocates again; published
runs (:mod:`distlab.evidence.plan.runs`) :func:`from_published`; the verification on real ranks
(:mod:`distlab.plan.verify.recompute`) :attr:`Recompute.runs_as`; a layout's label
:attr:`Recompute.label`. A new policy is one entry of :data:`RECOMPUTES`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from distlab._checks import check_choice

__all__ = ["FULL", "NONE", "OP", "PUBLISHED_RECOMPUTE", "RECOMPUTE", "RECOMPUTES", "SELECTIVE",
           "Again", "Keeps", "Recompute", "TpAgain", "from_published", "recompute_policy"]


class Keeps(Enum):
    """What a layer keeps from its forward for its backward."""

    EVERYTHING = "every tensor its backward reads"
    NO_QUADRATIC = "every tensor but the attention's a s^2 b ones (the softmax, its dropout)"
    PER_OP = ("its input, the outputs of its odd-numbered matrix products in forward order, the "
              "attention kernel's outputs and, with sequence parallelism, each reduce-scatter's "
              "output")
    INPUT = "its input only"


class Again(Enum):
    """What the backward runs again of the layer's forward."""

    NOTHING = "nothing"
    ATTENTION = "the attention's s^2 products (Q K^T and the product with V)"
    UNSAVED_PRODUCTS = ("the matrix products whose outputs the policy does not keep (the "
                        "even-numbered ones and every biased one), not the attention")
    LAYER = "the whole layer's forward"


class TpAgain(Enum):
    """Which of a layer's forward tensor-parallel collectives the backward runs again."""

    NONE = "none"
    WITHOUT_SP = ("all of them without sequence parallelism; with it none (the reduce-scatters' "
                  "outputs are kept, and the gathers are backward's own regather of the inputs)")
    ALL = "all of them"


@dataclass(frozen=True)
class Recompute:
    """One activation-recompute policy.

    Attributes:
        name: how a user writes it (``Layout(recompute=...)``, ``--recompute``).
        label: its short name in a layout's label (``""``: none shown).
        keeps: what each layer keeps from its forward for its backward.
        again: what the backward runs again (FLOPs and seconds the step time adds).
        tp_again: which of the layer's forward tensor-parallel collectives the backward runs
            again.
        runs_as: what it runs as on a decoder with a fused attention kernel
            (:mod:`distlab.plan.verify.recompute`): ``"none"``, ``"op"`` or ``"full"``.
        published: how a published run states it (``"none"``, ``"selective"``, ``"full"``).
        published_note: the note a published run adds to tell it apart from another policy it
            states alike (``None``: none needed).
        source: where the policy is defined.
    """

    name: str
    label: str
    keeps: Keeps
    again: Again
    tp_again: TpAgain
    runs_as: str
    published: str
    published_note: str | None
    source: str

    @property
    def recomputes(self) -> bool:
        """Whether the backward runs any of the forward again."""
        return self.again is not Again.NOTHING

    @property
    def keeps_quadratic(self) -> bool:
        """Whether the attention's ``a s^2 b`` tensors (where a kernel makes them) are kept."""
        return self.keeps is Keeps.EVERYTHING

    @property
    def keeps_input_only(self) -> bool:
        """Whether a layer keeps its input and nothing else."""
        return self.keeps is Keeps.INPUT

    @property
    def keeps_per_op(self) -> bool:
        """Whether a layer keeps what torchtitan's per-op list saves (:attr:`Keeps.PER_OP`)."""
        return self.keeps is Keeps.PER_OP

    @property
    def checkpointed(self) -> bool:
        """Whether the layer runs under a checkpoint: its forward keeps only what the policy
        saves, so the norms' statistics and the MLP's intermediate results are not kept (the
        backward makes them again)."""
        return self.keeps in (Keeps.PER_OP, Keeps.INPUT)

    @property
    def repeats_attention(self) -> bool:
        """Whether the backward runs the attention's ``s^2`` products again."""
        return self.again in (Again.ATTENTION, Again.LAYER)

    def repeats_tp_forward(self, sequence_parallel: bool) -> bool:
        """Whether the backward runs the layer's forward tensor-parallel collectives again
        (:attr:`tp_again`), with or without sequence parallelism."""
        if self.tp_again is TpAgain.WITHOUT_SP:
            return not sequence_parallel
        return self.tp_again is TpAgain.ALL

    def forward_again_flops(self, *, layer: float, attention: float,
                            unsaved_products: float) -> float:
        """FLOPs of one layer's forward the backward runs again, given the layer's whole
        forward, its attention's ``s^2`` products and the products the per-op list does not
        keep (any unit, the same for the three)."""
        return {Again.NOTHING: 0.0, Again.ATTENTION: attention,
                Again.UNSAVED_PRODUCTS: unsaved_products, Again.LAYER: layer}[self.again]


NONE = Recompute("none", "", Keeps.EVERYTHING, Again.NOTHING, TpAgain.NONE, "none", "none", None,
                 "no recompute")
SELECTIVE = Recompute(
    "selective", "sel", Keeps.NO_QUADRATIC, Again.ATTENTION, TpAgain.NONE, "none", "selective",
    None, "Korthikanti et al. 2022, section 5; Megatron-LM's --recompute-granularity selective")
OP = Recompute(
    "op", "op-ac", Keeps.PER_OP, Again.UNSAVED_PRODUCTS, TpAgain.WITHOUT_SP, "op", "selective",
    "selective per op", "torchtitan's per-op selective activation checkpointing "
    "(selective_ac_option = 'op', _save_list in parallelize_llama.py)")
FULL = Recompute("full", "full-ac", Keeps.INPUT, Again.LAYER, TpAgain.ALL, "full", "full", None,
                 "full activation checkpointing: each layer again from its input")

RECOMPUTES: dict[str, Recompute] = {rc.name: rc for rc in (NONE, SELECTIVE, OP, FULL)}
"""Every policy by name, from the one that keeps the most to the one that keeps the least."""

RECOMPUTE: tuple[str, ...] = tuple(RECOMPUTES)
"""The policies' names (``"none"``, ``"selective"``, ``"op"``, ``"full"``)."""

PUBLISHED_RECOMPUTE: tuple[str, ...] = tuple(dict.fromkeys(rc.published
                                                           for rc in RECOMPUTES.values()))
"""How published runs state a policy (``"none"``, ``"selective"``, ``"full"``)."""


def recompute_policy(recompute: Recompute | str) -> Recompute:
    """``recompute`` itself, or the policy a name of :data:`RECOMPUTE` names; ``ValueError``
    listing the names for any other string, ``TypeError`` for another type."""
    if isinstance(recompute, Recompute):
        return recompute
    if not isinstance(recompute, str):
        raise TypeError(f"recompute must be a Recompute or one of {', '.join(RECOMPUTE)}, got "
                        f"{type(recompute).__name__}")
    return RECOMPUTES[check_choice("recompute", recompute, RECOMPUTE)]


def from_published(recompute: str, note: str | None = None) -> Recompute:
    """The policy a published run states as ``recompute`` (one of :data:`PUBLISHED_RECOMPUTE`)
    with ``note`` (its activation-checkpointing note): the policy stated so with that note,
    else the one stated so with none (torchtitan's ``"selective per layer"``, every n-th layer
    checkpointed whole, stays ``"selective"``)."""
    check_choice("recompute", recompute, PUBLISHED_RECOMPUTE)
    stated = [rc for rc in RECOMPUTES.values() if rc.published == recompute]
    for rc in stated:
        if note is not None and rc.published_note == note:
            return rc
    return next(rc for rc in stated if rc.published_note is None)
