"""The one leave-one-out judge (:mod:`distlab.evidence.judge`) and the rule that only commands,
judge, viz and the profile reach the evidence."""

from __future__ import annotations

from distlab.evidence import judge as loo
from distlab.evidence.nccl import fit_execution
from distlab.evidence.rccl import judged as rccl_judged


def test_each_group_is_fitted_on_the_others_only() -> None:
    items = [("a", 1.0), ("a", 3.0), ("b", 10.0), ("c", 100.0)]
    fits = loo.leave_one_out(items, lambda p: p[0], lambda rest: sum(v for _, v in rest))
    assert fits == {"a": 110.0, "b": 104.0, "c": 14.0}
    assert list(fits) == ["a", "b", "c"]


def test_a_lone_group_has_nothing_to_fit_on() -> None:
    assert loo.leave_one_out([("a", 1.0)], lambda p: p[0], lambda rest: len(rest)) == {}
    assert loo.leave_one_out([], lambda p: p, len) == {}


def test_nccl_and_rccl_judge_through_it(monkeypatch) -> None:
    calls: list[int] = []
    real = loo.leave_one_out

    def counting(items, group, fit):
        calls.append(1)
        return real(items, group, fit)

    monkeypatch.setattr(fit_execution, "leave_one_out", counting)
    monkeypatch.setattr(rccl_judged, "leave_one_out_fits", counting)
    assert fit_execution.leave_one_source_out([]) == []
    judged = rccl_judged.judge(tables=rccl_judged.tree_fit_tables())
    assert len(calls) == 2
    assert [j.tree_left_out for j in judged] == [True] * len(judged) and len(judged) == 2
