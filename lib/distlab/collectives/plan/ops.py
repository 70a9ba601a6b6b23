"""Reduction operators and the dtypes each supports, shared by simulation and execution."""

from __future__ import annotations

from typing import Any

from distlab._checks import check_choice, check_str

__all__ = ["OPS", "check_op", "check_op_dtype", "is_floating"]

OPS: tuple[str, ...] = ("sum", "prod", "max", "min", "avg")

_FLOAT_NAMES = ("float16", "bfloat16", "float32", "float64")


def check_op(op: Any) -> str:
    """Return ``op`` (lower-cased) if it is one of :data:`OPS`, else raise listing them."""
    check_str("op", op, example=" | ".join(OPS))
    return check_choice("op", op.lower(), OPS)


def _plain_name(dtype: Any) -> str:
    """``torch.float32`` / ``np.dtype("float32")`` -> ``"float32"``, as written (complex too,
    which :func:`distlab.vocabulary.dtype_name` refuses and :func:`check_op_dtype` names)."""
    return str(dtype).replace("torch.", "")


def is_floating(dtype: Any) -> bool:
    """True for float16, bfloat16, float32, float64 (NumPy or torch dtype)."""
    return _plain_name(dtype) in _FLOAT_NAMES


def check_op_dtype(op: str, dtype: Any) -> None:
    """Raise ``ValueError`` for combinations no backend does: ``avg`` on non-floating dtypes,
    and any op on ``bool`` or complex data."""
    name = _plain_name(dtype)
    if name == "bool" or name.startswith("complex"):
        raise ValueError(f"dtype {name} is not supported; use an integer or floating dtype")
    if op == "avg" and not is_floating(dtype):
        raise ValueError(f"op='avg' needs a floating dtype (float16, bfloat16, float32, float64), "
                         f"got {name}; use op='sum' and divide")
