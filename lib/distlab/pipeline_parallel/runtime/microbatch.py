"""A batch cut into microbatches along dim 0, and the last stage's outputs put back together.

torch.distributed.pipelining's default: every tensor among the positional and keyword arguments
(nested in lists, tuples and dicts too) is cut with ``torch.tensor_split(t, n, dim=0)``, so a
batch of 10 in 4 microbatches gives 3, 3, 2, 2 samples; anything that is not a tensor goes to
every microbatch unchanged. A tensor with fewer than ``n`` samples along dim 0 (or with no dim 0)
cannot give every microbatch a sample and is refused with a ``ValueError`` naming its size and
``n_microbatches`` (torch refuses it too, with a less direct message). Outputs are merged with
``torch.cat`` along dim 0, leaf by leaf.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import keystr, tree_flatten, tree_flatten_with_path, tree_unflatten

from distlab._checks import check_int

__all__ = ["merge_outputs", "split_batch", "split_target"]


def _split_leaf(where: str, value: Any, n: int) -> list[Any]:
    if not isinstance(value, torch.Tensor):
        return [value] * n
    if value.dim() == 0:
        raise ValueError(f"{where} is a 0-dim tensor: it has no batch dim (dim 0) to split "
                         f"into n_microbatches={n}")
    size = value.size(0)
    if size < n:
        raise ValueError(f"{where} has batch size {size} (dim 0), which cannot be split into "
                         f"n_microbatches={n}: every microbatch needs at least one sample; "
                         f"pass a batch of at least {n} or fewer microbatches")
    chunks = list(torch.tensor_split(value, n, dim=0))
    if value.requires_grad and value.is_leaf:  # views of a leaf: keep their .grad readable
        for c in chunks:
            c.retain_grad()
    return chunks


def _name(path: Any) -> str:
    """``args[0]`` or ``kwargs['mask']`` for a leaf's pytree path in ``(args, kwargs)``."""
    text = keystr(path)
    if text.startswith("[0]"):
        return "args" + text[3:]
    return "kwargs" + text[3:]


def split_batch(args: tuple[Any, ...], kwargs: dict[str, Any] | None,
                n_microbatches: int) -> tuple[list[tuple[Any, ...]], list[dict[str, Any]]]:
    """``(args_per_microbatch, kwargs_per_microbatch)``: every tensor in ``args`` and ``kwargs``
    cut into ``n_microbatches`` pieces along dim 0 (``torch.tensor_split``), other values
    repeated. No arguments at all (a stage after the first) gives empty ones per microbatch.

    Raises:
        ValueError: ``n_microbatches < 1``, or a tensor with fewer than ``n_microbatches``
            samples along dim 0 (the message names it, its batch size and ``n_microbatches``).
    """
    n = check_int("n_microbatches", n_microbatches, minimum=1)
    kwargs = dict(kwargs or {})
    if not args and not kwargs:
        return [() for _ in range(n)], [{} for _ in range(n)]
    paths, spec = tree_flatten_with_path((tuple(args), kwargs))
    split = [_split_leaf(_name(path), v, n) for path, v in paths]
    out_args, out_kwargs = [], []
    for m in range(n):
        a, k = tree_unflatten([s[m] for s in split], spec)
        out_args.append(tuple(a))
        out_kwargs.append(dict(k))
    return out_args, out_kwargs


def split_target(target: Any, n_microbatches: int) -> list[Any] | None:
    """``target`` cut along dim 0 like the batch (:func:`split_batch`); ``None`` stays None."""
    n = check_int("n_microbatches", n_microbatches, minimum=1)
    if target is None:
        return None
    leaves, spec = tree_flatten(target)
    split = [_split_leaf("target", v, n) for v in leaves]
    return [tree_unflatten([s[m] for s in split], spec) for m in range(n)]


def merge_outputs(chunks: list[Any]) -> Any:
    """The outputs of every microbatch, in microbatch order, as one batch: tensor leaves
    concatenated along dim 0 (0-dim tensors stacked, one value per microbatch), other leaves
    as the list of every microbatch's value."""
    if not chunks:
        raise ValueError("merge_outputs: no microbatch outputs to merge")
    flat = [tree_flatten(c) for c in chunks]
    spec = flat[0][1]
    for i, (_, s) in enumerate(flat):
        if s != spec:
            raise ValueError(f"merge_outputs: microbatch {i}'s output has structure {s}, "
                             f"microbatch 0's {spec}")
    merged = []
    for j in range(len(flat[0][0])):
        values = [leaves[j] for leaves, _ in flat]
        if all(isinstance(v, torch.Tensor) for v in values):
            merged.append(torch.stack(values) if values[0].dim() == 0 else torch.cat(values))
        else:
            merged.append(values)
    return tree_unflatten(merged, spec)
