"""The hop between processes in the pipeline model: where plan_for puts it, what crosses, and a
measured hop cost."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from distlab.bench.loading import compare_executors
from distlab.loading import equal_stages
from distlab.loading.bottleneck import plan_for
from distlab.loading.hop_cost import (
    executor_hop_path,
    measure_hop_cost,
    output_nbytes,
    worker_output_nbytes,
)
from distlab.loading.synthetic_stages import IdentityStage

NAMES, COSTS = ["read", "decode", "pin", "compute"], [1.0, 2.0, 0.5, 1.5]
PLACES = ["worker", "worker", "host", "host"]


def _costs(plan):
    return {s.name: s.cost_s for s in plan}


def test_processes_pay_the_hop_in_the_host_thread_torch_in_the_consumer() -> None:
    assert _costs(plan_for("processes", NAMES, COSTS, PLACES, hop_s=0.25)) == \
        {"worker": 3.0, "pin": 0.75, "compute": 1.5}
    # the worker's part of the hop (into shared memory) is the worker station's
    assert _costs(plan_for("processes", NAMES, COSTS, PLACES, hop_s=0.25, hop_send_s=0.5)) == \
        {"worker": 3.5, "pin": 0.75, "compute": 1.5}
    assert _costs(plan_for("torch", NAMES, COSTS, PLACES, hop_s=0.25)) == \
        {"worker": 3.0, "pin": 0.5, "compute": 1.75}
    assert _costs(plan_for("torch", NAMES, COSTS, PLACES, hop_s=0.25, hop_in="host")) == \
        {"worker": 3.0, "pin": 0.75, "compute": 1.5}
    # no host stage: the process executor's host thread is a station of its own
    plan = plan_for("processes", ["read", "compute"], [1.0, 1.0], ["worker", "host"],
                    hop_s=0.25)
    assert [(s.name, s.cost_s, s.workers) for s in plan] == \
        [("worker", 1.0, 2), ("hop", 0.25, 1), ("compute", 1.0, 1)]
    # nothing crosses: no workers, or executors without processes
    for ex, workers in (("processes", 0), ("torch", 0), ("threads", 2), ("sync", 2)):
        assert plan_for(ex, NAMES, COSTS, PLACES, workers=workers, hop_s=0.25,
                        hop_send_s=0.5) == plan_for(ex, NAMES, COSTS, PLACES, workers=workers)
    with pytest.raises(ValueError, match="hop_s"):
        plan_for("processes", NAMES, COSTS, PLACES, hop_s=-1.0)
    with pytest.raises(ValueError, match="hop_send_s"):
        plan_for("processes", NAMES, COSTS, PLACES, hop_send_s=float("nan"))
    with pytest.raises(ValueError, match="hop_in"):
        plan_for("processes", NAMES, COSTS, PLACES, hop_s=1.0, hop_in="gpu")


def test_what_crosses() -> None:
    x = {"a": [torch.zeros(3, 4), np.zeros(5, dtype=np.int16)], "b": (b"xyz", 7, "text")}
    assert output_nbytes(x) == 48 + 10 + 3
    stages = [IdentityStage("a"), IdentityStage("b")]
    stages[1].placement = "host"
    assert worker_output_nbytes(stages, torch.ones(8)) == 32
    assert worker_output_nbytes(stages, torch.ones(8), workers=0) == 0
    assert executor_hop_path() in ("hop_shm_fd", "hop_shm_fs")


def test_measured_hop_cost() -> None:
    assert measure_hop_cost(0).seconds == 0.0   # nothing crosses: no worker is spawned
    c = measure_hop_cost(65536, repeats=3, warmup=1)
    assert c.seconds > 0 and len(c.samples) == 3 and c.busy and c.startup_s > 0
    assert c.seconds == sorted(c.samples)[1] and c.as_dict()["path"] == c.path
    assert c.send_s > 0 and c.receive_s > 0   # a shared-memory path: both sides pay


def test_compare_executors_carries_the_model_without_the_hop() -> None:
    stages = equal_stages("sleep", 3, 0.001)
    cmp = compare_executors(stages, 6, ["processes"], workers=1, repeats=1, warmup=1,
                            hop_s=0.004, hop_send_s=0.001)
    by = {r["executor"]: r for r in cmp["rows"]}
    assert by["sync"]["hop_s"] == 0.0 and by["processes"]["hop_s"] == 0.004
    assert by["processes"]["hop_send_s"] == 0.001
    assert by["sync"]["sim_s"] == pytest.approx(by["sync"]["sim_s_no_hop"])
    assert by["processes"]["sim_s"] > by["processes"]["sim_s_no_hop"]
