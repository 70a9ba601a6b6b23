"""Stages and shard files: real reads, real work, honest skips, clear errors."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from distlab.loading import (
    STAGE_KINDS,
    CollateStage,
    ComputeStage,
    DecodeStage,
    FnStage,
    H2DStage,
    PinStage,
    ReadStage,
    ShardSet,
    SleepStage,
    Stage,
    data_stages,
    device_stages,
    equal_stages,
    loading_stages,
    make_stage,
    synthetic_stages,
    write_shards,
)
from distlab.loading.cpuwork import burn, matmuls_per_second
from distlab.loading.synthetic_stages import BurnStage, IdentityStage


@pytest.fixture()
def shards(tmp_path) -> ShardSet:
    return ShardSet(write_shards(tmp_path, n_shards=2, records_per_shard=3, record_nbytes=8,
                                 seed=7), 8)


def test_shards_are_seeded_and_reads_wrap(tmp_path, shards) -> None:
    again = write_shards(tmp_path / "b", n_shards=2, records_per_shard=3, record_nbytes=8, seed=7)
    assert [p.read_bytes() for p in again] == [p.read_bytes() for p in shards.files]
    blob = b"".join(p.read_bytes() for p in shards.files)
    assert len(shards) == 6
    assert shards.read_record(4) == blob[32:40]
    assert shards.read_record(7) == blob[8:16]  # wraps modulo 6
    assert shards.read_batch(1, 4) == [blob[i * 8:(i + 1) * 8] for i in (4, 5, 0, 1)]
    with pytest.raises(ValueError, match="record_nbytes"):
        ShardSet(shards.files, 5)
    with pytest.raises(ValueError, match="n_shards"):
        write_shards(tmp_path, n_shards=0)


def test_read_decode_collate(shards) -> None:
    recs = ReadStage(shards, batch_size=2)(1)
    assert recs == [shards.read_record(2), shards.read_record(3)]
    dec = DecodeStage(0.0)(recs)
    assert all(t.dtype == torch.float32 and t.shape == (8,) for t in dec)
    expect = np.frombuffer(recs[0], dtype=np.uint8) / 255.0
    assert np.allclose(dec[0].numpy(), expect)
    batch = CollateStage()(dec)
    assert batch.shape == (2, 8)


def test_pin_and_h2d_are_honest_about_skipping() -> None:
    x = torch.ones(4)
    pin, h2d = PinStage(), H2DStage()
    if torch.cuda.is_available():
        assert pin(x).is_pinned() and pin.skipped is None
        assert h2d(x).is_cuda and h2d.last_copy_ms is not None
    else:
        assert pin.skipped and "no accelerator" in pin.skipped
        assert pin(x) is x
        assert h2d.skipped and h2d(x) is x and h2d.last_copy_ms is None


def test_compute_train_step_learns() -> None:
    stage = ComputeStage(mode="train", hidden=16)
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(0))
    losses = [stage(x) for _ in range(30)]
    assert losses[-1] < losses[0]
    pickle.loads(pickle.dumps(stage))  # picklable (model dropped) for worker processes
    with pytest.raises(ValueError, match="mode"):
        ComputeStage(mode="gpu")


def test_burn_does_work() -> None:
    assert burn(0.0) == 0
    assert burn(0.005) >= 1
    rate = matmuls_per_second()
    assert rate > 0 and matmuls_per_second() == rate          # calibrated once, cached
    assert burn(0.01, fixed_work=True) == max(1, round(0.01 * rate))
    assert BurnStage(0.001, fixed_work=True)(7) == 7


def test_stage_contract() -> None:
    with pytest.raises(TypeError, match="must implement.*process"):
        class Broken(Stage):  # noqa: F841 - defining it is the test
            name = "broken"
    with pytest.raises(ValueError, match="cost_s"):
        SleepStage(-1)
    with pytest.raises(TypeError, match="fn"):
        FnStage(3)
    with pytest.raises(ValueError, match="name"):
        FnStage(abs, name="a/b").check()
    for bad in (float("inf"), float("nan")):             # finite costs only
        with pytest.raises(ValueError, match="cost_s"):
            SleepStage(bad)
    with pytest.raises(TypeError, match="cost_s"):
        SleepStage("1ms")
    with pytest.raises(TypeError, match="cost_s"):
        SleepStage(True)
    import numpy as np
    assert SleepStage(np.float32(0.5)).cost_s == 0.5     # numpy scalars are numbers


class _Costs:
    """Records the seconds each stage asks to sleep or burn, instead of spending them, so a
    test sees that a stage takes the cost it was made with (no clock is read)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[str, float, bool]] = []
        sleeper = SimpleNamespace(sleep=lambda s: self.calls.append(("sleep", s, False)))
        for mod in (data_stages, synthetic_stages, device_stages):
            monkeypatch.setattr(mod, "time", sleeper)
            monkeypatch.setattr(mod, "burn", self.burn)

    def burn(self, seconds: float, size: int = 128, *, fixed_work: bool = False) -> int:
        """Stands for :func:`distlab.loading.cpuwork.burn`."""
        self.calls.append(("burn", seconds, fixed_work))
        return 0

    def take(self) -> list[tuple[str, float, bool]]:
        """The calls since the last ``take``."""
        out, self.calls = self.calls, []
        return out


# kind -> (class, category, placement) as the stage modules document them
MADE = {"read": (ReadStage, "io", "worker"), "decode": (DecodeStage, "cpu", "worker"),
        "collate": (CollateStage, "cpu", "worker"), "pin": (PinStage, "copy", "host"),
        "h2d": (H2DStage, "copy", "host"), "compute": (ComputeStage, "compute", "host"),
        "sleep": (SleepStage, "io", "worker"), "burn": (BurnStage, "cpu", "worker"),
        "identity": (IdentityStage, "cpu", "worker")}


def test_make_stage_by_name(shards, monkeypatch) -> None:
    """Each kind is the stage it names, placed and grouped as documented, and does its job:
    read returns the batch's shard records, decode their bytes / 255 as float32, collate
    stacks, the cost kinds sleep or burn the cost they were made with."""
    assert set(MADE) == set(STAGE_KINDS)
    made = {k: make_stage(k, cost_s=0.25, shards=shards, batch_size=4) for k in STAGE_KINDS}
    for kind, st in made.items():
        st.check()
        cls, category, placement = MADE[kind]
        assert (type(st), st.name, st.category, st.placement) == (cls, kind, category, placement)
    assert make_stage("sleep", cost_s=0.1, name="nap").name == "nap"
    costs = _Costs(monkeypatch)
    recs = made["read"](1)                      # batch 1 of 4 records: 4, 5, then wraps to 0, 1
    assert recs == [shards.read_record(i) for i in (4, 5, 6, 7)]
    assert recs[2] == shards.read_record(0) and recs[0] != recs[1]
    assert costs.take() == [("sleep", 0.25, False)]            # read: cost_s is its latency
    dec = made["decode"](recs)
    assert [(t.dtype, tuple(t.shape)) for t in dec] == [(torch.float32, (8,))] * 4
    for t, rec in zip(dec, recs, strict=True):
        assert torch.equal(t, torch.tensor(list(rec), dtype=torch.float32) / 255.0)
    assert costs.take() == [("burn", 0.25, False)]
    batch = made["collate"](dec)
    assert batch.shape == (4, 8) and torch.equal(batch, torch.stack(dec))
    assert made["collate"](batch) is batch                     # a tensor passes as it is
    x = object()
    assert made["sleep"](x) is x and costs.take() == [("sleep", 0.25, False)]
    assert made["burn"](x) is x and costs.take() == [("burn", 0.25, False)]
    assert made["compute"](batch) is batch and costs.take() == [("burn", 0.25, False)]
    assert made["identity"](x) is x and costs.take() == []
    assert [made[k].cost_s for k in STAGE_KINDS] == [0.25, 0.25, None, None, None, 0.25, 0.25,
                                                     0.25, 0.0]
    for kind in ("pin", "h2d"):                 # moves the batch, or says why it cannot here
        out = made[kind](batch)
        if made[kind].skipped:
            assert out is batch and "no" in made[kind].skipped
        else:
            assert (out.is_pinned() if kind == "pin" else out.is_cuda)
            assert torch.equal(out.cpu(), batch)
    work = equal_stages("work", 2, 0.5)
    assert [(s.name, s.placement) for s in work] == [("work0", "worker"), ("work1", "host")]
    assert work[0](x) is x and costs.take() == [("burn", 0.5, True)]   # fixed amount of work
    with pytest.raises(ValueError, match="stage kind"):
        make_stage("resize")
    with pytest.raises(ValueError, match="shards"):
        make_stage("read")
    with pytest.raises(ValueError, match="kind"):
        equal_stages("gpu")
    with pytest.raises(TypeError, match="n must be an int"):
        equal_stages("sleep", 2.0)
    import numpy as np
    assert len(equal_stages("sleep", np.int64(2), 0.0)) == 2
    es = equal_stages("sleep", 3, 0.001)
    assert [s.name for s in es] == ["sleep0", "sleep1", "sleep2"]
    assert es[-1].placement == "host" and es[0].placement == "worker"
    assert [s.name for s in loading_stages(shards)] == ["read", "decode", "collate", "pin", "h2d",
                                                        "compute"]
