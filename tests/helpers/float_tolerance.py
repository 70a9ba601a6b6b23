"""How far two float computations of the same sums may differ, derived from the computation.

Two runs of one formula that add the same terms in another order (another BLAS kernel, another
CPU's vector width, another thread count, a sum split over tensor-parallel ranks and then
all-reduced) round differently. Higham, *Accuracy and Stability of Numerical Algorithms*
(2nd ed., SIAM 2002), ch. 3: with unit roundoff ``u`` (``eps / 2``, round to nearest; ``2**-24``
for float32, whose ``torch.finfo(torch.float32).eps`` is ``2**-23``) and
``gamma_n = n u / (1 - n u)`` (Lemma 3.1), a sum or inner product of ``n`` terms computed in
*any* order satisfies ``|fl(x^T y) - x^T y| <= gamma_n |x|^T |y|`` (eq. 3.4-3.5, §3.1). Two
orders each lie within that of the exact value, so they differ by at most ``2 gamma_n |x|^T |y|``.
A network chains such reductions: to first order the errors of ``depth`` reductions in series
add (each layer passes its input's relative error on, scaled by its condition number, which
residual connections and normalisations keep near one), giving :func:`float_tolerance`.

What stands for ``|x|^T |y|``: the largest magnitude of the compared tensor. For terms of
random sign ``|x^T y| ~ |x|^T |y| / sqrt(n)``, while rounding errors of random sign grow like
``sqrt(n) u`` rather than ``n u`` (Higham §3.6, "rule of thumb"), so ``n u max|result|`` is the
typical difference with the true ``|x|^T |y|``; taking the tensor's maximum, not each element's
own value, covers elements that cancel to near zero (where an elementwise ``rtol`` fails first).

What the bound is not: loose enough to pass a real bug. A wrong shard, a missing all-reduce or a
doubled gradient moves a value by a sizeable part of the tensor's magnitude, while the bound is
``2 depth gamma_n`` of it: 3.2e-4 for float32 at n = 64, depth = 42 (tests/tensor_parallel's
Transformer). tests/test_float_tolerance.py checks both sides: sums reordered stay far inside,
one rank's shard of a sum missing lands far outside.

The proxy fails where terms cancel by orders of magnitude (``1e8 + 1 - 1e8``); compare such a
value with its own ``|x|^T |y|`` passed to :func:`float_tolerance`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["error_ratio", "float_tolerance", "unit_roundoff"]


def unit_roundoff(dtype: Any) -> float:
    """``u = eps / 2`` of a torch or numpy floating dtype (round to nearest).

    Args:
        dtype: ``torch.float32``, ``numpy.float32`` and the like.

    Returns:
        The unit roundoff: 2**-24 for float32, 2**-53 for float64, 2**-8 for bfloat16.
    """
    try:
        import torch

        if isinstance(dtype, torch.dtype):
            return torch.finfo(dtype).eps / 2
    except ImportError:  # pragma: no cover - torch is a test dependency
        pass
    import numpy as np

    return float(np.finfo(dtype).eps) / 2


def float_tolerance(dtype: Any, reduction_length: int, magnitude: float, depth: int = 1) -> float:
    """Largest ``|a - b|`` between two computations of the same value that sum in other orders.

    ``2 * depth * gamma_n * magnitude`` with ``gamma_n = n u / (1 - n u)`` (module doc;
    Higham ch. 3, eq. 3.4-3.5).

    Args:
        dtype: the dtype the reductions ran in.
        reduction_length: ``n``, the longest sum behind the value: a matmul's inner dimension,
            the tokens a weight gradient sums over, the ranks an all-reduce adds (take the
            largest of those in the chain).
        magnitude: the scale of the terms summed, in the compared values' units; tests pass
            the largest ``|expected|`` of the compared tensor.
        depth: reductions in series from the inputs to the value (forward and backward).

    Returns:
        The absolute tolerance.

    Raises:
        ValueError: ``reduction_length`` or ``depth`` below 1, ``magnitude`` negative, or
            ``n u >= 1`` (the bound says nothing there).
    """
    if reduction_length < 1:
        raise ValueError(f"reduction_length must be >= 1, got {reduction_length}")
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    if not magnitude >= 0:
        raise ValueError(f"magnitude must be >= 0, got {magnitude}")
    nu = reduction_length * unit_roundoff(dtype)
    if nu >= 1:
        raise ValueError(f"reduction_length = {reduction_length} times the unit roundoff of "
                         f"{dtype} is {nu:g} >= 1: no rounding-error bound holds")
    return 2 * depth * nu / (1 - nu) * magnitude


def error_ratio(actual: Any, expected: Any, *, reduction_length: int, depth: int = 1) -> float:
    """``max|actual - expected|`` over :func:`float_tolerance` at ``max|expected|``.

    At most 1 means the two agree to rounding; a test asserts ``<= 1`` and reports the ratio.

    Args:
        actual: a torch tensor.
        expected: a torch tensor of the same shape (the reference computation).
        reduction_length: as in :func:`float_tolerance`.
        depth: as in :func:`float_tolerance`.

    Returns:
        The ratio; ``inf`` when the shapes differ or a value is not finite where the other is,
        0.0 when both are equal (even all zero).
    """
    if tuple(actual.shape) != tuple(expected.shape):
        return float("inf")
    if actual.numel() == 0:
        return 0.0
    a, e = actual.detach().double(), expected.detach().double()
    if not bool((a.isfinite() == e.isfinite()).all()):
        return float("inf")
    finite = e.isfinite()
    diff = float((a - e)[finite].abs().max()) if bool(finite.any()) else 0.0
    if diff == 0.0:
        return 0.0
    magnitude = float(e[finite].abs().max())
    tol = float_tolerance(actual.dtype, reduction_length, magnitude, depth)
    return diff / tol if tol > 0 else float("inf")
