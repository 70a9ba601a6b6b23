"""distlab.samplers.DistributedSampler against torch.utils.data.DistributedSampler, and its
extras."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.utils.data as tud
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distlab import launch
from distlab.samplers import DistributedEvalSampler, DistributedSampler, SetEpochWarning
from distlab.samplers.ranks import indices_on_rank
from distlab.samplers.torch_compat import epoch_order

SETTINGS = settings(max_examples=250, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

lengths = st.one_of(st.integers(0, 12), st.integers(0, 3000))
params = st.fixed_dictionaries({
    "n": lengths,
    "world": st.integers(1, 17),
    "rank_frac": st.floats(0, 1, exclude_max=True),
    "shuffle": st.booleans(),
    "seed": st.one_of(st.integers(-3, 3), st.integers(-(2**40), 2**40)),
    "epoch": st.integers(0, 50),
    "drop_last": st.booleans(),
})


def _both(p: dict) -> tuple[tud.DistributedSampler, DistributedSampler]:
    rank = int(p["rank_frac"] * p["world"])
    ref = tud.DistributedSampler(range(p["n"]), p["world"], rank, p["shuffle"], p["seed"],
                                 p["drop_last"])
    mine = DistributedSampler(p["n"], p["world"], rank, p["shuffle"], p["seed"], p["drop_last"])
    ref.set_epoch(p["epoch"])
    mine.set_epoch(p["epoch"])
    return ref, mine


@SETTINGS
@given(params)
def test_sequence_equals_torch(p: dict) -> None:
    ref, mine = _both(p)
    expected = list(ref)
    assert list(mine) == expected
    assert mine.indices().dtype == torch.int64
    assert mine.indices().tolist() == expected
    assert len(mine) == len(ref) == len(expected)
    assert (mine.num_samples, mine.total_size) == (ref.num_samples, ref.total_size)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.integers(1, 9), st.integers(0, 5))
def test_all_ranks_small_lengths_pad_by_repeating(n: int, world: int, seed: int) -> None:
    """Lengths below the world size repeat the list several times; every rank matches torch."""
    for rank in range(world):
        for drop_last in (False, True):
            ref = tud.DistributedSampler(range(n), world, rank, True, seed, drop_last)
            mine = DistributedSampler(list(range(n)), world, rank, True, seed, drop_last)
            assert list(mine) == list(ref)


def test_dataset_object_and_int_length_agree() -> None:
    data = tud.TensorDataset(torch.arange(37))
    a = DistributedSampler(data, 4, 1, seed=3)
    b = DistributedSampler(37, 4, 1, seed=3)
    assert list(a) == list(b) == list(tud.DistributedSampler(data, 4, 1, seed=3))


@pytest.mark.parametrize("n", [1, 1000, 1 << 17])
def test_int32_order_is_torch_int64_randperm(n: int) -> None:
    g = torch.Generator()
    g.manual_seed(11)
    assert torch.equal(epoch_order(n, True, 5, 6).long(), torch.randperm(n, generator=g))


def test_works_in_dataloader() -> None:
    data = tud.TensorDataset(torch.arange(50))
    got = [int(x) for (b,) in tud.DataLoader(data, batch_size=4,
                                             sampler=DistributedSampler(data, 3, 2))
           for x in b]
    assert got == list(tud.DistributedSampler(data, 3, 2))


# ---- resume -------------------------------------------------------------------------------

@settings(max_examples=120, deadline=None)
@given(params, st.floats(0, 1), st.integers(0, 3))
def test_resume_mid_epoch_continues_exactly(p: dict, frac: float, later: int) -> None:
    _, mine = _both(p)
    full = mine.indices().tolist()
    k = int(frac * len(full))
    it = iter(mine)
    head = [next(it) for _ in range(k)]
    state = mine.state_dict()
    assert state["consumed"] == k and state["epoch"] == p["epoch"]
    fresh = DistributedSampler(p["n"], p["world"], mine.rank, p["shuffle"], 999, p["drop_last"],
                               warn_repeated_epoch=False)
    fresh.load_state_dict(state)
    assert fresh.seed == p["seed"] and fresh.epoch == p["epoch"]
    assert head + list(fresh) == full
    # the pass after the resumed one is a whole epoch again, and later epochs are unaffected
    assert list(fresh) == full
    fresh.set_epoch(p["epoch"] + later)
    ref, _ = _both({**p, "epoch": p["epoch"] + later})
    assert list(fresh) == list(ref)


def test_state_after_finished_pass_is_done_and_large_chunks_count_right() -> None:
    s = DistributedSampler(300_000, 2, 1, seed=1)
    it = iter(s)
    for _ in range(70_000):  # crosses a 64 Ki chunk boundary
        next(it)
    assert s.state_dict()["consumed"] == 70_000
    rest = list(it)
    assert len(rest) == 150_000 - 70_000
    assert s.state_dict()["consumed"] == 150_000


@pytest.mark.parametrize("n", [0, 1, 7, 20])
def test_finished_pass_and_one_index_earlier_agree_and_resume_yields_nothing(n: int) -> None:
    s = DistributedSampler(n, 2, 0, seed=3)
    s.set_epoch(4)
    it = iter(s)
    for _ in range(len(s)):
        next(it)
    before_end = s.state_dict()  # last index out, generator not yet exhausted
    assert list(it) == []
    after_end = s.state_dict()
    assert before_end == after_end
    assert (after_end["epoch"], after_end["consumed"]) == (4, len(s))
    fresh = DistributedSampler(n, 2, 0, seed=3)
    fresh.load_state_dict(after_end)
    assert list(fresh) == []
    assert fresh.state_dict()["consumed"] == len(s)
    fresh.set_epoch(5)  # the next epoch starts from its beginning
    assert fresh.state_dict()["consumed"] == 0
    ref = DistributedSampler(n, 2, 0, seed=3)
    ref.set_epoch(5)
    assert list(fresh) == list(ref)


@pytest.mark.parametrize("flag", ["shuffle", "drop_last"])
def test_numpy_bool_flags(flag: str) -> None:
    np = pytest.importorskip("numpy")
    s = DistributedSampler(10, 3, 1, **{flag: np.bool_(True)})
    assert getattr(s, flag) is True
    with pytest.raises(TypeError, match=flag):
        DistributedSampler(10, 3, 1, **{flag: np.int64(1)})


def test_is_a_torch_distributed_sampler_with_every_attribute_torch_reads() -> None:
    import torch.utils.data as tud

    s = DistributedSampler(list(range(10)), 4, 1, shuffle=True, seed=2, drop_last=True)
    ref = tud.DistributedSampler(list(range(10)), 4, 1, shuffle=True, seed=2, drop_last=True)
    assert isinstance(s, tud.DistributedSampler)
    assert not isinstance(DistributedEvalSampler(10, 4, 1), tud.DistributedSampler)
    for attr in ("num_replicas", "rank", "epoch", "dataset", "shuffle", "seed", "drop_last",
                 "num_samples", "total_size"):
        assert getattr(s, attr) == getattr(ref, attr), attr
    s.set_epoch(3)
    ref.set_epoch(3)
    assert list(s) == list(ref) and len(s) == len(ref)
    assert "randperm" not in vars(s)  # nothing of torch's list-building state


def test_state_names_the_epoch_of_the_running_pass() -> None:
    s = DistributedSampler(40, 2, 0, seed=5)
    s.set_epoch(2)
    full = s.indices().tolist()
    it = iter(s)
    head = [next(it) for _ in range(3)]
    s.set_epoch(3)  # mid-pass: the running pass still belongs to epoch 2
    state = s.state_dict()
    assert (state["epoch"], state["consumed"]) == (2, 3)
    fresh = DistributedSampler(40, 2, 0)
    fresh.load_state_dict(state)
    assert head + list(fresh) == full


def test_load_state_rejects_other_parameters() -> None:
    s = DistributedSampler(10, 2, 0)
    state = s.state_dict()
    DistributedSampler(10, 4, 0).load_state_dict(state)  # another world size: elastic resume
    with pytest.raises(ValueError, match="length"):
        DistributedSampler(11, 2, 0).load_state_dict(state)
    with pytest.raises(ValueError, match="rank"):
        DistributedSampler(10, 2, 1).load_state_dict(state)
    with pytest.raises(ValueError, match="consumed"):
        DistributedSampler(10, 2, 0).load_state_dict({**state, "consumed": 6})
    with pytest.raises(ValueError, match="missing"):
        DistributedSampler(10, 2, 0).load_state_dict({"epoch": 0})


# ---- evaluation mode ------------------------------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(lengths, st.integers(1, 17), st.booleans(), st.integers(0, 9))
def test_eval_sampler_sees_every_index_once(n: int, world: int, shuffle: bool, seed: int) -> None:
    per_rank = []
    for rank in range(world):
        s = DistributedEvalSampler(n, world, rank, shuffle=shuffle, seed=seed)
        got = list(s)
        assert len(got) == len(s) == len(range(rank, n, world))
        per_rank.append(got)
    every = sorted(i for got in per_rank for i in got)
    assert every == list(range(n))
    counts = [len(g) for g in per_rank]
    assert max(counts, default=0) - min(counts, default=0) <= 1
    # where torch would not pad, the eval sampler is torch's sampler exactly
    if n % world == 0:
        for rank in range(world):
            ref = tud.DistributedSampler(range(n), world, rank, shuffle, seed)
            assert per_rank[rank] == list(ref)


# ---- forgotten set_epoch --------------------------------------------------------------------

def test_warns_once_when_second_pass_has_same_epoch() -> None:
    s = DistributedSampler(20, 2, 0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        list(s)
        s.set_epoch(1)
        list(s)
        assert not caught
        list(s)  # same epoch again
        list(s)
    assert len(caught) == 1
    assert caught[0].category is SetEpochWarning
    assert "set_epoch" in str(caught[0].message)


def test_warning_fires_at_iter_not_first_next() -> None:
    s = DistributedSampler(20, 2, 0)
    list(s)
    with pytest.warns(SetEpochWarning):
        iter(s)


@pytest.mark.parametrize("how", ["argument", "filter", "no_shuffle"])
def test_warning_can_be_silenced(how: str) -> None:
    s = DistributedSampler(20, 2, 0, shuffle=how != "no_shuffle",
                           warn_repeated_epoch=how != "argument")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if how == "filter":
            warnings.filterwarnings("ignore", category=SetEpochWarning)
        list(s)
        list(s)
    assert not caught


def test_peek_then_set_epoch_does_not_warn() -> None:
    import torch.utils.data as tud

    s = DistributedSampler(20, 2, 0)
    loader = tud.DataLoader(range(20), batch_size=4, sampler=s)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        next(iter(loader))  # peek a batch
        for epoch in range(3):
            s.set_epoch(epoch)
            assert len(list(loader)) == 3


def test_resume_is_not_a_forgotten_set_epoch() -> None:
    s = DistributedSampler(20, 2, 0)
    it = iter(s)
    next(it)
    state = s.state_dict()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s.load_state_dict(state)
        list(s)


# ---- bad input ------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, exc, words", [
    ({"dataset": 10, "num_replicas": 0, "rank": 0}, ValueError, ["num_replicas", ">= 1", "0"]),
    ({"dataset": 10, "num_replicas": 4, "rank": 4}, ValueError, ["rank", "[0, 3]", "4"]),
    ({"dataset": 10, "num_replicas": 4, "rank": -1}, ValueError, ["rank", "[0, 3]"]),
    ({"dataset": -1, "num_replicas": 2, "rank": 0}, ValueError, ["dataset", ">= 0", "-1"]),
    ({"dataset": 10, "num_replicas": 2.0, "rank": 0}, TypeError, ["num_replicas", "float"]),
    ({"dataset": 10, "num_replicas": 2, "rank": "1"}, TypeError, ["rank", "str"]),
    ({"dataset": 10.5, "num_replicas": 2, "rank": 0}, TypeError, ["dataset"]),
    ({"dataset": 10, "num_replicas": 2, "rank": 0, "seed": 1.5}, TypeError, ["seed"]),
    ({"dataset": 10, "num_replicas": 2, "rank": 0, "shuffle": 1}, TypeError, ["shuffle"]),
    ({"dataset": 10, "num_replicas": 2, "rank": 0, "drop_last": None}, TypeError,
     ["drop_last"]),
    ({"dataset": 10, "num_replicas": True, "rank": 0}, TypeError, ["num_replicas", "bool"]),
])
def test_bad_arguments_name_the_argument(kwargs: dict, exc: type, words: list[str]) -> None:
    with pytest.raises(exc) as info:
        DistributedSampler(**kwargs)
    for w in words:
        assert w in str(info.value)


def test_bad_epoch_and_missing_process_group() -> None:
    s = DistributedSampler(10, 2, 0)
    with pytest.raises(TypeError, match="epoch"):
        s.set_epoch(1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seed \\+ epoch"):
        s.set_epoch(2**64)
    with pytest.raises(ValueError, match="num_replicas=None.*process group"):
        DistributedSampler(10)
    with pytest.raises(ValueError, match="rank=None.*process group"):
        DistributedSampler(10, num_replicas=2)


def test_numpy_and_tensor_integers_are_accepted() -> None:
    s = DistributedSampler(np.int64(11), np.int32(3), torch.tensor(2), seed=np.uint8(4))
    assert list(s) == list(tud.DistributedSampler(range(11), 3, 2, seed=4))


# ---- process group defaults -----------------------------------------------------------------

@pytest.mark.multiprocess
def test_defaults_come_from_the_process_group() -> None:
    results = launch.run(indices_on_rank, 3, args=(11,), kwargs={"seed": 2, "epoch": 1},
                         timeout=120)
    for rank, res in enumerate(results):
        assert (res["num_replicas"], res["sampler_rank"]) == (3, rank)
        ref = tud.DistributedSampler(range(11), 3, rank, seed=2)
        ref.set_epoch(1)
        assert res["indices"] == list(ref)


# ---- next-epoch precompute ------------------------------------------------------------------

def _distlab_threads() -> list:
    import threading

    return [t for t in threading.enumerate() if t.name == "distlab-next-epoch"]


@settings(max_examples=30, deadline=None)
@given(n=st.integers(0, 500), w=st.integers(1, 5), seed=st.integers(0, 3),
       plan=st.lists(st.sampled_from(["next", "same", "jump", "reseed", "partial"]),
                     min_size=1, max_size=6))
def test_prefetch_next_epoch_identical_output_whatever_the_guess(n, w, seed, plan) -> None:
    r = w - 1
    fast = DistributedSampler(n, w, r, seed=seed, prefetch_next_epoch=True,
                              warn_repeated_epoch=False)
    epoch = 0
    for step in plan:
        if step == "next":
            epoch += 1
        elif step == "jump":
            epoch += 3
        elif step == "reseed":
            fast.seed += 1
        fast.set_epoch(epoch)
        ref = DistributedSampler(n, w, r, seed=fast.seed)
        ref.set_epoch(epoch)
        if step == "partial":
            it = iter(fast)
            head = [next(it) for _ in range(min(2, len(fast)))]
            assert head == list(ref)[:len(head)]
        else:
            assert list(fast) == list(ref)
    fast.close()
    assert fast._next is None and not _distlab_threads()


def test_prefetch_uses_the_precomputed_order_and_joins_on_close() -> None:
    s = DistributedSampler(10_000, 4, 2, seed=1, prefetch_next_epoch=True)
    list(s)
    ahead = s._next
    assert ahead is not None and ahead.key == (10_000, True, 1, 1)
    s.set_epoch(1)
    ref = DistributedSampler(10_000, 4, 2, seed=1)
    ref.set_epoch(1)
    assert list(s) == list(ref)
    assert s._next is not ahead  # consumed, and epoch 2 is being drawn now
    s.close()
    assert not _distlab_threads()
    s2 = DistributedSampler(100, 2, 0, prefetch_next_epoch=True)
    list(s2)
    del s2
    import gc

    gc.collect()
    assert not _distlab_threads()
