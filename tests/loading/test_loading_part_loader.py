"""The async part loader: same parts as sync, trainer idle time, clean shutdown on every path."""

from __future__ import annotations

import os
import signal
import threading

import pytest
import torch

from distlab.loading import (
    PartLoader,
    PartLoadError,
    ProducerExitedError,
    ShardSet,
    train_on_parts,
    write_shards,
)
from distlab.loading.part_loader import load_part
from helpers.leaks import no_leaks
from helpers.loading_util import children_outlive_parent, fail_on_part_two, slow_load

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> ShardSet:
    d = tmp_path_factory.mktemp("parts")
    return ShardSet(write_shards(d, n_shards=5, records_per_shard=16, record_nbytes=128, seed=3),
                    128)


def test_async_yields_the_same_parts_in_order(shards) -> None:
    with no_leaks():
        with PartLoader(shards, mode="sync") as loader:
            sync = [(p.part_id, p.data.clone()) for p in loader]
        with PartLoader(shards, [4, 0, 2], mode="async", queue_size=1) as loader:
            asy = [(p.part_id, p.data.clone()) for p in loader]
    assert [i for i, _ in sync] == [0, 1, 2, 3, 4]
    assert [i for i, _ in asy] == [4, 0, 2]
    for i, data in asy:
        assert torch.equal(data, sync[i][1])
        assert data.shape == (16, 128) and data.dtype == torch.uint8
    assert torch.equal(load_part(shards, 1).flatten(),
                       torch.frombuffer(bytearray(shards.files[1].read_bytes()), dtype=torch.uint8))


def test_trainer_idle_time_sync_vs_async(shards) -> None:
    with no_leaks():
        s = train_on_parts(shards, mode="sync", latency_s=0.02, step_s=0.0, steps_per_part=2)
        a = train_on_parts(shards, mode="async", queue_size=2, latency_s=0.0, step_s=0.0,
                           steps_per_part=2)
    assert s.n_parts == a.n_parts == 5
    lanes_s = set(s.timeline.lanes)
    assert lanes_s == {"trainer/load", "trainer/compute"}
    assert set(a.timeline.lanes) == {"producer/startup", "producer/load", "trainer/compute"}
    # the producer's start-up is one span of its own, over before the first load and the first
    # step, and it is the startup_s reported (not part of wall_s)
    (startup,) = [x for x in a.timeline.spans if x.lane == "producer/startup"]
    assert startup.duration_us * 1e-6 == pytest.approx(a.startup_s, rel=1e-6)
    first_work = min(x.start_us for x in a.timeline.spans if x.lane != "producer/startup")
    assert startup.end_us <= first_work
    # sync: the trainer is idle during every one of its own loads, so idle >= the loads' time
    loads = sum(x.duration_us for x in s.timeline.spans if x.lane == "trainer/load") * 1e-6
    assert s.idle_s >= loads * 0.999
    assert s.startup_s == 0.0 and a.startup_s > 0.0  # producer start-up reported apart
    assert len([x for x in a.timeline.spans if x.lane == "trainer/compute"]) == 10


def test_early_stop_reaps_the_producer(shards) -> None:
    with no_leaks():
        with PartLoader(shards, list(range(5)) * 20, mode="async", queue_size=2) as loader:
            for part in loader:
                assert loader.producer_pid is not None
                if part.part_id == 1:
                    break
        assert loader.producer_pid is None


def test_producer_error_names_the_part(shards) -> None:
    with no_leaks():
        with pytest.raises(PartLoadError, match="part 2") as info:
            train_on_parts(shards, mode="async", load_fn=fail_on_part_two, step_s=0.0)
    assert info.value.part == 2 and "disk on fire" in str(info.value)


def test_killed_producer_is_a_clear_error(shards) -> None:
    with no_leaks():
        with PartLoader(shards, list(range(5)) * 10, mode="async", load_fn=slow_load) as loader:
            it = iter(loader)
            next(it)
            threading.Timer(0.1, os.kill, (loader.producer_pid, signal.SIGKILL)).start()
            with pytest.raises(ProducerExitedError, match="exited unexpectedly"):
                for _ in it:
                    pass


def test_bad_configuration(shards) -> None:
    with pytest.raises(ValueError, match="mode"):
        PartLoader(shards, mode="eager")
    with pytest.raises(ValueError, match="queue_size"):
        PartLoader(shards, queue_size=0)
    with pytest.raises(ValueError, match="latency_s"):
        PartLoader(shards, latency_s=-1)
    with pytest.raises(TypeError, match="shards"):
        PartLoader("nope")
    with pytest.raises(ValueError, match="steps_per_part"):
        train_on_parts(shards, steps_per_part=0)


def test_producer_dies_with_a_killed_parent(shards) -> None:
    """SIGKILL the trainer process while its producer is stuck in a 60 s load: the producer must
    be gone within seconds."""
    code = (
        "from distlab.loading import PartLoader, ShardSet\n"
        "from helpers.loading_util import hang_load\n"
        f"shards = ShardSet({[str(f) for f in shards.files]!r}, {shards.record_nbytes})\n"
        "with PartLoader(shards, mode='async', load_fn=hang_load, timeout_s=300) as loader:\n"
        "    loader.start()\n"
        "    print(loader.producer_pid, flush=True)\n"
        "    next(iter(loader))\n")
    alive = children_outlive_parent(code)
    assert not alive, f"the producer outlived its killed parent: {alive}"


def _loads_begun_during_compute(result) -> int:
    """How many parts' loads began while the trainer was still computing on the part before."""
    spans = result.timeline.spans
    compute_end = {}
    for sp in spans:
        if sp.lane == "trainer/compute":
            part = sp.args["part"]
            compute_end[part] = max(compute_end.get(part, 0.0), sp.end_us)
    order = [sp.args["part"] for sp in spans if sp.lane == "trainer/compute"]
    parts = list(dict.fromkeys(order))
    loads = {sp.args["part"]: sp.start_us for sp in spans if sp.category == "io"}
    return sum(loads[b] < compute_end[a] for a, b in zip(parts, parts[1:], strict=False))


def test_async_loads_overlap_compute_and_sync_loads_do_not(shards) -> None:
    """Loads of 20 ms, 40 ms of compute per part. Sync loads part k only after computing on part
    k-1 (no overlap, whatever the machine's load); async's producer runs ahead, so its loads begin
    while the trainer computes. The order of spans is checked, not their wall-clock lengths: on a
    loaded machine the producer may be starved for a while, but over four parts at least one of
    its loads begins before the trainer is done with the part before."""
    kw = dict(latency_s=0.02, step_s=0.02, steps_per_part=2)
    with no_leaks():
        s = train_on_parts(shards, mode="sync", **kw)
        a = train_on_parts(shards, mode="async", queue_size=2, **kw)
    assert s.n_parts == a.n_parts == 5
    assert s.idle_s >= 5 * 0.02 * 0.9  # every sync load is idle time of the trainer
    assert _loads_begun_during_compute(s) == 0
    assert _loads_begun_during_compute(a) >= 1, a.timeline.spans


def test_idle_fraction_is_idle_over_wall() -> None:
    from distlab.loading import PartsResult
    from distlab.timeline import Timeline

    assert PartsResult("sync", Timeline(), 2, wall_s=2.0, idle_s=0.5).idle_fraction == 0.25
    assert PartsResult("sync", Timeline(), 0, wall_s=0.0, idle_s=0.0).idle_fraction == 0.0


def test_async_loader_and_process_workers_run_from_a_script_read_on_stdin(shards,
                                                                          tmp_path) -> None:
    """``python - <<EOF``: ``__main__`` names ``<stdin>``, which is no file; the producer and the
    process executor's workers start without running that path again (they failed before with
    ``FileNotFoundError: '<stdin>'`` and "producer process exited unexpectedly")."""
    import subprocess
    import sys

    script = ("from distlab.loading import PartLoader, ShardSet, run_pipeline\n"
              "from distlab.loading.synthetic_stages import SleepStage\n"
              f"shards = ShardSet({[str(f) for f in shards.files]!r}, {shards.record_nbytes})\n"
              "with PartLoader(shards, mode='async') as loader:\n"
              "    parts = [p.part_id for p in loader]\n"
              "res = run_pipeline([SleepStage(0.0)], 4, 'processes')\n"
              "print('RESULT', parts, res.n_items, flush=True)\n")
    proc = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True,
                          timeout=180, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "RESULT [0, 1, 2, 3, 4] 4" in proc.stdout
    assert "FileNotFoundError" not in proc.stderr
