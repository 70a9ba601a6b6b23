"""Every model's fitted constants are committed in the model, and refitting them from the evidence
(:mod:`distlab.evidence`) gives them again: the planner's compute rate, NCCL's execution and
all-to-all constants, RCCL's execution constants."""

from __future__ import annotations

import dataclasses

import pytest

from distlab.evidence.nccl import fit_execution
from distlab.evidence.nccl.alltoall_judged import alltoall_tables, fit_alltoall
from distlab.evidence.plan.fit_rate import fit_rate, rate_loss
from distlab.evidence.plan.published import load_published
from distlab.evidence.plan.runs import run_inputs
from distlab.evidence.rccl import judged as rccl_judged
from distlab.nccl.alltoall import shipped_alltoall
from distlab.plan.calibration import SHIPPED as PLAN_SHIPPED
from distlab.rccl.execution import SHIPPED as RCCL_SHIPPED


def test_the_planners_shipped_rate_is_the_fit_of_the_calibration_split_alone() -> None:
    published = load_published()
    calibration = [run_inputs(r) for r in published.runs(split="calibration")]
    fitted = fit_rate(calibration)
    assert fitted.width_scale == PLAN_SHIPPED.width_scale
    assert fitted.attention == pytest.approx(PLAN_SHIPPED.attention, abs=1e-9)
    assert fitted.efficiency.keys() == PLAN_SHIPPED.efficiency.keys()
    for key, value in PLAN_SHIPPED.efficiency.items():
        assert fitted.efficiency[key] == pytest.approx(value, abs=2e-3), key
    # a held-out source appears in no calibration run
    held = {k for k, s in published.sources.items() if s.split == "held_out"}
    assert held and not {r.run.source for r in calibration} & held
    # and moving an efficiency away from the fit only makes the loss worse
    base = rate_loss(calibration, PLAN_SHIPPED)
    for key in PLAN_SHIPPED.efficiency:
        for step in (-0.05, 0.05):
            efficiency = {**PLAN_SHIPPED.efficiency, key: PLAN_SHIPPED.efficiency[key] + step}
            moved = dataclasses.replace(PLAN_SHIPPED, efficiency=efficiency)
            assert rate_loss(calibration, moved) >= base


def test_rccls_shipped_constants_are_the_fit_of_the_calibration_tables() -> None:
    fitted = rccl_judged.fit_constants()
    assert dataclasses.replace(fitted, source=RCCL_SHIPPED.source) == RCCL_SHIPPED
    assert fitted.source.endswith("aac8_mi300x_1node, aac10_mi300x_2node; the tree across "
                                  "nodes on aac14_mi355x_2node, alib_mi355x_2node")
    # physical: below the links' and NICs' rates, an MSCCL link below xGMI's raw 64 GB/s
    assert 0.5 < RCCL_SHIPPED.xgmi_efficiency < 1 and 0.5 < RCCL_SHIPPED.net_efficiency < 1
    assert 16 < RCCL_SHIPPED.msccl_link_gbps < 64
    assert RCCL_SHIPPED.msccl_fixed_us["LL"] < RCCL_SHIPPED.msccl_fixed_us["Simple"] < \
        RCCL_SHIPPED.ring_fixed_us < RCCL_SHIPPED.net_ring_fixed_us


def test_nccls_shipped_constants_are_the_fit_on_every_published_table(tmp_path) -> None:
    refit = fit_execution.write_shipped(tmp_path / "c.json")
    shipped = fit_execution.shipped_constants()
    for name in fit_execution.CONSTANT_NAMES:
        assert getattr(shipped, name) == pytest.approx(getattr(refit, name), abs=2e-3)
    assert set(shipped.calibrated_on) == {p["source"] for p in fit_execution.calibration_points()}


def test_nccls_alltoall_constants_are_the_fit_on_the_calibration_tables() -> None:
    fitted, shipped = fit_alltoall(), shipped_alltoall()
    assert fitted.calibrated_on == shipped.calibrated_on == tuple(
        t["id"] for t in alltoall_tables()["tables"] if t["role"] == "calibrate")
    for name in ("base_us", "efficiency", "step_us", "net_base_us", "net_efficiency",
                 "net_step_us", "net_proxy_us"):
        for p, v in getattr(fitted, name).items():
            assert getattr(shipped, name)[p] == pytest.approx(v, rel=1e-6, abs=1e-9), (name, p)
    assert 0.5 < shipped.efficiency["Simple"] <= 1.0
