"""Hogwild: the lost-update counts are exact where they claim to be (pure checks against a
float32 replay), a locked run loses nothing, a run trains, and its processes die with it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from distlab.hogwild import Task, missed_elements, run_hogwild, witness_lost
from helpers.leaks import no_leaks
from helpers.loading_util import children_outlive_parent


def test_witness_counts_overwritten_increments_exactly() -> None:
    w = torch.full((3, 4), 10.0)
    assert witness_lost(w, 10) == (0, 0)
    w[0, 0], w[2, 3] = 7.0, 9.0
    assert witness_lost(w, 10) == (4, 2)
    with pytest.raises(ValueError, match="whole numbers"):
        witness_lost(torch.tensor([9.5]), 10)
    with pytest.raises(ValueError, match="whole numbers"):
        witness_lost(torch.tensor([11.0]), 10)
    with pytest.raises(ValueError, match="expected"):
        witness_lost(w, 2 ** 24 + 1)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_missed_elements_bound_is_sound_and_catches_a_dropped_update(seed) -> None:
    """Replay float32 updates in a random order (rounding happens, nothing is lost): 0 missed;
    drop one update on one element: exactly that element is missed."""
    rng = np.random.default_rng(seed)
    n, steps = 500, 400
    p0 = rng.normal(0, 1, n).astype(np.float32)
    deltas = (rng.normal(0, 1e-2, (steps, n)) * rng.random((steps, 1))).astype(np.float32)
    p = p0.copy()
    for d in deltas[rng.permutation(steps)]:
        p += d
    applied = deltas.astype(np.float64).sum(0)
    magnitude = np.abs(deltas.astype(np.float64)).sum(0)
    args = [torch.from_numpy(a) for a in (p0, p, applied, magnitude)]
    assert missed_elements(*args, steps) == (0, 0.0)
    lossy = p.copy()
    lossy[17] -= deltas[5, 17] if abs(deltas[5, 17]) > 1e-4 else np.float32(1e-2)
    missed, mass = missed_elements(args[0], torch.from_numpy(lossy), args[2], args[3], steps)
    assert missed == 1 and mass > 0
    with pytest.raises(ValueError, match="one shape"):
        missed_elements(args[0][:3], *args[1:], steps)


def test_task_is_the_same_in_every_process() -> None:
    a, b = Task(seed=3), Task(seed=3)
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    ma, mb = a.model(), b.model()
    assert torch.equal(torch.rand(1), before), "model() leaves the global RNG alone"
    assert all(torch.equal(x, y) for x, y in zip(ma.parameters(), mb.parameters(), strict=True))
    assert all(torch.equal(x, y) for x, y in zip(a.eval_set(), b.eval_set(), strict=True))
    xa, _ = a.batch(8, a.stream(0))
    xb, _ = a.batch(8, a.stream(1))
    assert not torch.equal(xa, xb) and torch.equal(xa, b.batch(8, b.stream(0))[0])
    assert not torch.equal(Task(seed=4).eval_set()[0], a.eval_set()[0])
    with pytest.raises(ValueError, match="hidden"):
        Task(hidden=0)


def test_run_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="multiple of processes"):
        run_hogwild(2, 100, batch=32)
    with pytest.raises(ValueError, match="processes"):
        run_hogwild(0, 64)
    with pytest.raises(ValueError, match="lr"):
        run_hogwild(1, 64, lr=0.0)
    with pytest.raises(TypeError, match="task"):
        run_hogwild(1, 64, task="mnist")


def test_locked_and_unlocked_runs_train_and_count() -> None:
    """With the lock no update can be lost, and both counts say 0 (the parameter check is a
    sound bound); without it the counts are whatever happened, but consistent. Both runs learn
    and report start-up apart."""
    task = Task(hidden=64, seed=1)
    run_hogwild(1, 64, task=task, batch=32)   # opens the resource tracker before the check
    with no_leaks(fds=True, maps=True):
        locked = run_hogwild(2, 4096, task=task, batch=32, lock=True)
        free = run_hogwild(2, 4096, task=task, batch=32, lock=False)
    for r in (locked, free):
        assert r.steps_per_process == 64 and r.samples == 4096
        assert r.eval_loss < r.initial_eval_loss / 2, "it learns"
        assert r.startup_s > 0 and r.wall_s > 0 and r.steps_per_s > 0
        assert [s for _, s, _ in r.curve] == list(range(32, 4097, 32))
        assert all(t1 <= t2 for (t1, _, _), (t2, _, _) in zip(r.curve, r.curve[1:], strict=False))
        assert r.lost.total == 2 * 64 * r.lost.elements
        assert r.lost.elements_hit <= r.lost.lost <= r.lost.total
        assert 0 <= r.lost.missed <= r.lost.elements
        assert r.row()["run"] == r.label
        assert r.update_s > 0 and r.lock_wait_s >= 0 and 0 < r.update_share < 1
        assert r.row()["lock_wait_share"] == (r.lock_wait_share if r.lock else None)
    assert free.lock_wait_s == 0.0, "no lock, no wait"
    assert (locked.lost.lost, locked.lost.missed, locked.lost.mass) == (0, 0, 0.0)
    assert locked.label == "2 processes, lock" and free.label == "2 processes, no lock"


def test_hogwild_processes_die_with_a_killed_parent() -> None:
    code = ("import os, threading, psutil\n"
            "from distlab.hogwild import run_hogwild, Task\n"
            "def tell():\n"
            "    import time\n"
            "    while True:\n"
            "        kids = psutil.Process().children()\n"
            "        ws = [k.pid for k in kids\n"
            "              if 'resource_tracker' not in ' '.join(k.cmdline())]\n"
            "        if len(ws) == 2:\n"
            "            print(*ws, flush=True); return\n"
            "        time.sleep(0.05)\n"
            "threading.Thread(target=tell, daemon=True).start()\n"
            "run_hogwild(2, 2 ** 22, task=Task(hidden=512), batch=32)\n")
    alive = children_outlive_parent(code)
    assert not alive, f"Hogwild processes outlived their killed parent: {alive}"
