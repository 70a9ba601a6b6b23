"""Both ZeRO engines offer every call of the protocol ``ZeroDataParallel`` uses (checked on the
classes: methods defined, attributes assigned in ``__init__``)."""

from __future__ import annotations

import ast
import inspect
import textwrap

import pytest

from distlab.zero.bucketed import Bucketed
from distlab.zero.engine import BucketEngine, ZeroEngine
from distlab.zero.stage3 import Stage3


def _methods(proto: type) -> set[str]:
    return {n for c in proto.__mro__ if c.__module__ == proto.__module__
            for n, v in vars(c).items() if callable(v) and not n.startswith("_")}


def _attributes(proto: type) -> set[str]:
    return {n for c in proto.__mro__ if c.__module__ == proto.__module__
            for n in getattr(c, "__annotations__", {})}


def _assigned_in_init(cls: type) -> set[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls.__init__)))
    return {t.attr for node in ast.walk(tree) if isinstance(node, (ast.Assign, ast.AnnAssign))
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
            for t in ast.walk(target)
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
            and t.value.id == "self"}


@pytest.mark.parametrize(("cls", "proto"), [(Bucketed, ZeroEngine), (Stage3, ZeroEngine),
                                            (Bucketed, BucketEngine)])
def test_engine_offers_the_protocol(cls: type, proto: type) -> None:
    assert _methods(ZeroEngine) >= {"step", "after_forward", "close"}
    assert _attributes(BucketEngine) >= {"optimizer", "sync", "flats"}
    missing = {n for n in _methods(proto) if not callable(getattr(cls, n, None))}
    missing |= _attributes(proto) - _assigned_in_init(cls)
    assert not missing, f"{cls.__name__} lacks {sorted(missing)} of {proto.__name__}"


def test_stage3_is_no_bucket_engine() -> None:
    assert not {"set_divide_factor", "shadow_iteration"} & set(dir(Stage3))
