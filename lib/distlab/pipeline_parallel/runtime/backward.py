"""A stage's backward, whole (``B``) or split in two (``I`` then ``W``), on torch.autograd.

``B``: one ``torch.autograd.backward`` from the stage's roots (its outputs with the gradients
received for them, or the loss on the last stage): parameter gradients accumulate into ``.grad``
and the input gradients, to send back, land in the stage inputs' ``.grad``.

``I`` computes the input gradients only (``torch.autograd.grad`` to the stage inputs, graph
retained) and ``W`` the parameter gradients afterwards, without doing the input chain again:

- Call *D* the autograd nodes that lead to a stage input: ``I`` runs exactly those. A *cut
  edge* leaves a node of D for a node outside it (the weight side of a ``Linear``: the edge of
  ``AddmmBackward`` to ``TBackward`` of the weight, or to the bias's ``AccumulateGrad``). While
  ``I`` runs, a pre-hook on every node with a cut edge keeps the gradients that node receives.
- ``W`` runs each such node again with what it received, asking autograd only for its cut
  edges (``torch.autograd.grad`` to those ``GradientEdge``s: the engine computes only the
  outputs that lead there, e.g. the weight's matmul and the bias sum, not the input gradient),
  then one ``torch.autograd.backward`` from those edges to the parameters, so the gradients
  accumulate into ``.grad`` and post-accumulate hooks (DDP's) fire as in ``B``.

Every kernel is the one ``B`` runs on the same operands, so the gradients are bitwise those of
``B``. The construction needs the weight sides of different cut edges to share no node (no
parameter reached from two of them, as a weight tied across layers is); where they do, ``W``
runs the backward from the roots again to the parameters (correct, at the cost of the input
chain once more) and says so in :attr:`WeightJob.recomputes`, as it does when ``I`` is asked not
to split (``split=False``: a ZeRO-3 stage, whose units are gathered by hooks on their outputs'
backward). On the first stage (no input needs a gradient) ``I`` has nothing to do and ``W`` is
the whole backward, as in torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.autograd.graph import GradientEdge, get_gradient_edge

__all__ = ["WeightJob", "backward_full", "backward_input", "backward_weight"]


def _live(roots: Sequence[torch.Tensor],
          grads: Sequence[torch.Tensor]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    pairs = [(r, g) for r, g in zip(roots, grads, strict=True) if r.requires_grad]
    return [r for r, _ in pairs], [g for _, g in pairs]


def _input_grads(inputs: Sequence[Any]) -> tuple[torch.Tensor | None, ...]:
    return tuple(x.grad if isinstance(x, torch.Tensor) else None for x in inputs)


def backward_full(roots: Sequence[torch.Tensor], grads: Sequence[torch.Tensor],
                  inputs: Sequence[Any]) -> tuple[torch.Tensor | None, ...]:
    """``B``: gradients of ``roots`` (seeded with ``grads``) into every leaf's ``.grad``; the
    ``.grad`` of each of ``inputs`` (``None`` where it has none)."""
    live, seeds = _live(roots, grads)
    if live:
        torch.autograd.backward(live, seeds)
    return _input_grads(inputs)


@dataclass
class WeightJob:
    """What ``I`` leaves for ``W`` (one stage, one microbatch).

    Attributes:
        roots, grads: the backward's roots and their seeds (kept for a recompute, and so the
            graph stays alive until ``W``).
        cuts: node -> the cut edges ``(next node, its input slot)`` of that node.
        received: node -> the gradients it received during ``I``.
        direct: roots that lead to no stage input, with their seeds (weight sides of their own).
        recomputes: True where ``W`` runs the backward from the roots again (first stage, or
            weight sides that share nodes).
    """

    roots: list[torch.Tensor]
    grads: list[torch.Tensor]
    cuts: dict[Any, list[tuple[Any, int]]] = field(default_factory=dict)
    received: dict[Any, tuple[Any, ...]] = field(default_factory=dict)
    direct: list[tuple[GradientEdge, torch.Tensor]] = field(default_factory=list)
    recomputes: bool = False
    to_params: bool = True


def _node(t: torch.Tensor) -> Any:
    return get_gradient_edge(t).node


def _reaching(starts: list[Any], targets: set[Any]) -> dict[Any, bool]:
    """For every node reachable from ``starts``: does it lead to a node in ``targets``?"""
    reach: dict[Any, bool] = {}
    stack: list[tuple[Any, bool]] = [(n, False) for n in starts]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            reach[node] = node in targets or any(
                c is not None and reach.get(c, False) for c, _ in node.next_functions)
            continue
        if node in reach:
            continue
        reach[node] = False  # visiting; set for real once its children are done
        stack.append((node, True))
        stack.extend((c, False) for c, _ in node.next_functions
                     if c is not None and c not in reach)
    return reach


def _sides_disjoint(cuts: dict[Any, list[tuple[Any, int]]]) -> bool:
    """True where no node is reached from two different cut edges."""
    owner: dict[Any, tuple[Any, Any, int]] = {}
    for node, edges in cuts.items():
        for child, slot in edges:
            me = (node, child, slot)
            stack = [child]
            while stack:
                n = stack.pop()
                held = owner.get(n)
                if held == me:
                    continue
                if held is not None:
                    return False
                owner[n] = me
                stack.extend(c for c, _ in n.next_functions if c is not None)
    return True


def backward_input(roots: Sequence[torch.Tensor], grads: Sequence[torch.Tensor],
                   inputs: Sequence[Any], *, split: bool = True
                   ) -> tuple[tuple[torch.Tensor | None, ...], WeightJob]:
    """``I``: the gradient of each of ``inputs`` (``None`` for those that need none) and the
    :class:`WeightJob` that :func:`backward_weight` finishes. Parameter gradients are not
    touched. ``split=False``: the job's ``W`` runs the backward from the roots again."""
    live, seeds = _live(roots, grads)
    leaves = [x for x in inputs if isinstance(x, torch.Tensor) and x.requires_grad]
    job = WeightJob(live, seeds)
    if not live or not leaves:
        job.recomputes, job.to_params = True, False  # first stage: W is the whole backward
        return tuple(None for _ in inputs), job
    if split:
        targets = {_node(x) for x in leaves}
        reach = _reaching([_node(r) for r in live], targets)
        for node, leads in reach.items():
            if not leads:
                continue
            edges = list(dict.fromkeys((c, k) for c, k in node.next_functions
                                       if c is not None and not reach[c]))
            if edges:
                job.cuts[node] = edges
        job.direct = [(get_gradient_edge(r), g) for r, g in zip(live, seeds, strict=True)
                      if not reach[_node(r)]]
    if not split or not _sides_disjoint(job.cuts):
        job.cuts, job.direct, job.recomputes = {}, [], True
    received = job.received
    handles = [node.register_prehook(lambda got, node=node: received.__setitem__(node, got))
               for node in job.cuts]
    try:
        found = torch.autograd.grad(live, leaves, seeds, retain_graph=True, allow_unused=True)
    finally:
        for h in handles:
            h.remove()
    by_id = {id(x): g for x, g in zip(leaves, found, strict=True)}
    return tuple(by_id.get(id(x)) if isinstance(x, torch.Tensor) else None
                 for x in inputs), job


def backward_weight(job: WeightJob, params: Sequence[torch.Tensor]) -> None:
    """``W``: the parameter gradients the ``I`` of ``job`` left, accumulated into ``.grad``
    (post-accumulate hooks fire). Frees the job's graph."""
    params = [p for p in params if p.requires_grad]
    try:
        if job.recomputes:
            if job.roots:
                torch.autograd.backward(job.roots, job.grads,
                                        inputs=params if job.to_params and params else None)
            return
        seeds = [e for e, _ in job.direct]
        seed_grads = [g for _, g in job.direct]
        for node, edges in job.cuts.items():
            got = job.received.get(node)
            if got is None:
                continue
            outs = [GradientEdge(node, i) for i, g in enumerate(got) if g is not None]
            gs = [g for g in got if g is not None]
            if not outs:
                continue
            wanted = [GradientEdge(c, k) for c, k in edges]
            found = torch.autograd.grad(outs, wanted, gs, allow_unused=True)
            for e, g in zip(wanted, found, strict=True):
                if g is not None:
                    seeds.append(e)
                    seed_grads.append(g)
        if seeds and params:
            torch.autograd.backward(seeds, seed_grads, inputs=params)
    finally:
        job.roots, job.grads, job.cuts, job.received, job.direct = [], [], {}, {}, []
