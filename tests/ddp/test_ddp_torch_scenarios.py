"""torch's own DDP scenarios on torch DDP and on distlab's DDP, 2 and 3 gloo ranks, compared bit
for bit (parameters and buffers): torch's ``test_ddp_uneven_inputs`` models (batch norm, a conv
model, a small model, the rank that joins first or last skipping a parameter) over its iteration
maps (torch's baselines 0 and 5 shortened to 0 and 3, offsets 2 and 3, one or two early ranks),
with and without a comm hook; ``divide_by_initial_world_size``, ``enable=False``, throw on early
termination, ``model.join()``; unused parameters without Join, ``static_graph``, buffers not
broadcast, no_sync; and Join composing DDP with torch's ``ZeroRedundancyOptimizer`` and with
``test_join.py``'s ``AllReducer`` in either order; two forwards before one backward (a GAN
discriminator's step, batch norm buffers broadcast between them), two backwards of one forward,
a layer under two reentrant checkpoints, a static graph that changes (where torch raises,
distlab raises the cause torch names), a loss per output backpropagated one after the other.
Then what torch cannot run to an end: ranks
that disagree, unused parameters without ``find_unused_parameters``, a peer that went away.
Seeded random inputs differ per rank, so every summation order shows."""

from __future__ import annotations

import pytest

from distlab import launch
from distlab.uneven import failure_kind, uneven_error
from helpers.ddp_scenarios import compare_scenarios, distlab_only
from helpers.leaks import no_leaks

MODELS = [("small", {}), ("batch_norm", {}), ("conv", {}),
          ("unjoined_unused", {"unused": True}), ("joined_unused", {"unused": True}),
          ("alternating", {"unused": True, "opt": "momentum"}),
          ("small", {"hook": "allreduce"})]


def iteration_maps(world: int) -> list[list[int]]:
    """torch's ``test_ddp_uneven_inputs`` maps: ``early`` ranks train ``base`` batches (the
    second and later of them ``offset // 2`` more), the rest ``base + offset``."""
    maps = []
    for early in ([1, 2] if world > 2 else [1]):
        for base in (0, 3):
            for offset in (2, 3):
                counts = [base + (offset // 2 if 0 < r < early else 0) if r < early
                          else base + offset for r in range(world)]
                maps.append(counts)
    return maps


def extra_cases(world: int) -> list[dict]:
    even = [3] * world
    uneven = [2] + [4] * (world - 1)
    return [
        {"model": "small", "counts": uneven, "divide_initial": False},
        {"model": "batch_norm", "counts": uneven, "divide_initial": False},
        {"model": "small", "counts": even, "enable": False},
        {"model": "batch_norm", "counts": uneven, "join": "method"},
        {"model": "small", "counts": uneven, "throw": True},
        {"model": "batch_norm", "counts": uneven, "buffers": False},
        {"model": "alternating", "counts": uneven, "unused": True, "view": True, "opt": "adam"},
        {"model": "alternating", "counts": uneven, "unused": True, "no_sync_every": 2},
        {"model": "batch_norm", "counts": uneven, "no_sync_every": 2},
        # without Join: rank 0 skips a parameter, and the other unused-parameter paths
        {"model": "joined_unused", "counts": even, "unused": True, "join": "none"},
        {"model": "alternating", "counts": even, "unused": True, "join": "none", "opt": "adam"},
        {"model": "joined_unused", "counts": even, "static": True, "join": "none"},
        {"model": "batch_norm", "counts": even, "static": True, "join": "none"},
        {"model": "batch_norm", "counts": even, "buffers": False, "join": "none"},
        # Join composes (the Join docstring's example; test_join.py's AllReducer), any order
        {"model": "small", "counts": uneven, "with": ("zero",)},
        {"model": "small", "counts": uneven, "with": ("allreducer",), "ddp_last": True},
        {"model": "batch_norm", "counts": uneven, "with": ("allreducer",)},
        {"model": "batch_norm", "counts": uneven, "with": ("allreducer",), "ddp_last": True},
        # a GAN discriminator's step: two forwards (real, fake), one backward; buffers are
        # broadcast before the second forward, over running stats the first one saved
        *({"model": m, "counts": even, "join": "none", "steps": "two_forwards", **flags}
          for m, flags in [("discriminator", {}), ("conv", {}), ("batch_norm", {"unused": True}),
                           ("batch_norm", {"static": True})]),
        # a second backward in the first iteration (retain_graph): the reduction and the
        # bucket rebuild come from the first; the second accumulates locally, as torch's
        *({"model": m, "counts": even, "join": "none", "steps": "two_backwards", **flags}
          for m, flags in [("small", {}), ("batch_norm", {"view": True}),
                           ("batch_norm", {"static": True}), ("small", {"no_sync_every": 2})]),
        # a loss per output, backpropagated one after the other: the second backward brings
        # the gradients the first left waiting (one bucket, and one per parameter), or marks a
        # shared trunk ready twice (both raise)
        {"model": "two_branches", "counts": even, "join": "none", "steps": "per_output"},
        {"model": "two_branches", "counts": even, "join": "none", "steps": "per_output",
         "cap": 1e-5},
        {"model": "two_branches_trunk", "counts": even, "join": "none", "steps": "per_output"},
        # one layer under two reentrant checkpoints: marked ready twice (both raise), which
        # static_graph supports
        {"model": "checkpointed", "counts": even, "join": "none"},
        {"model": "checkpointed", "counts": even, "join": "none", "static": True},
        # static_graph and a graph that changes: unused first then used, used first then unused
        {"model": "alternating", "counts": even, "join": "none", "static": True},
        {"model": "alternating_used_first", "counts": even, "join": "none", "static": True},
    ]


def cases(world: int) -> list[dict]:
    """Every model over every map, and the extra cases. Where a rank joins before its first
    backward with ``find_unused_parameters``, torch's joined rank sends its used-parameter map
    uninitialised (``at::empty``), so torch's result depends on leftover memory (seen: garbage
    on one construction, zeros on the next; a -1 once made CI red); the torch arm zeroes that
    map at construction (helpers.ddp_scenarios._wrap), which is what distlab sends."""
    out = [{"model": m, "counts": c, **flags} for m, flags in MODELS
           for c in iteration_maps(world)]
    return out + extra_cases(world)


# (case fields, what torch's error starts with, what distlab's names), each on every rank
ERRORS = [
    ({"model": "checkpointed", "static": None}, "Expected to mark a variable ready only once",
     ["expected to mark a variable ready only once", "marked as ready twice",
      "parameter shared.", "reentrant backward", "static_graph=True"]),
    ({"model": "two_branches_trunk"}, "Expected to mark a variable ready only once",
     ["marked as ready twice", "parameter trunk.", "(its gradient hook fired twice)"]),
    ({"model": "alternating", "static": True}, "Your training graph has changed",
     ["training graph has changed", "parameter b.", "unused there", "static_graph=True"]),
    ({"model": "alternating_used_first", "static": True},
     "Expected to have finished reduction in the prior iteration",
     ["expected to have finished", "parameter(s) b.weight, b.bias (indices [2, 3])",
      "training graph has changed", "static_graph=True"]),
]


def _check_errors(world: int, rows: list[list[dict]], cs: list[dict]) -> None:
    """Where torch raises, distlab raises the cause torch names, naming the parameters."""
    for fields, torch_text, ours_texts in ERRORS:
        at = [i for i, c in enumerate(cs)
              if all(c.get(k) == v for k, v in fields.items())]
        assert at, fields
        for i in at:
            for rank in range(world):
                r = rows[rank][i]
                assert (r["torch_error"] or "").startswith(torch_text), (fields, r)
                ours = r["ours_error"] or ""
                assert ours.startswith(f"rank {rank}: "), (fields, ours)
                assert all(t in ours for t in ours_texts), (fields, ours)


def _check(world: int, rows: list[list[dict]], cs: list[dict]) -> None:
    bad = []
    for i, cfg in enumerate(cs):
        for rank, per in enumerate(rows):
            r = per[i]
            if (r["torch_error"] is None) != (r["ours_error"] is None):
                bad.append((cfg, rank, "error", r["torch_error"], r["ours_error"]))
            elif not (r["params_equal"] and r["buffers_equal"] and r["grad_none_equal"]):
                bad.append((cfg, rank, r["params_diff"], r["buffers_diff"],
                            r["grad_none_equal"]))
            elif r["allreducer"][0] != r["allreducer"][1]:
                bad.append((cfg, rank, "allreducer", r["allreducer"]))
    assert not bad, f"{len(bad)} of {len(cs) * world} (case, rank) pairs differ: {bad[:6]}"


@pytest.mark.parametrize("world", [2, 3])
def test_torch_scenarios_bitwise_equal_to_torch_ddp(world):
    cs = cases(world)
    with no_leaks():
        rows = launch.run(compare_scenarios, world, args=(cs,), timeout=400)
    _check(world, rows, cs)
    _check_errors(world, rows, cs)
    throws = [i for i, c in enumerate(cs) if c.get("throw")]
    assert throws and all(rows[0][i]["ours_error"] for i in throws)


def test_torch_result_depends_on_the_used_map_it_never_initialised():
    """Why the torch arm zeroes its used-parameter map: filled with -1 (what CI once found in
    that memory), torch's joined rank cancels the peer's use of ``t1`` and torch leaves that
    gradient unaveraged, so the parameters part from distlab's; zeroed, they are equal."""
    cs = [{"model": "unjoined_unused", "counts": [0, 3], "unused": True,
           "torch_used_map_fill": fill} for fill in (-1, 0)]
    with no_leaks():
        rows = launch.run(compare_scenarios, 2, args=(cs,), timeout=120)
    for garbage, zeros in rows:
        assert not garbage["params_equal"] and garbage["params_diff"] > 1e-3
        assert zeros["params_equal"]


# ---- what torch cannot run to an end: distlab alone ------------------------------------------

def test_disagreeing_ranks_and_unused_parameters_raise_clear_errors_on_every_rank():
    """Different models or bucket caps across ranks: every rank raises RankMismatchError at
    construction, naming what differs (gloo would abort one process in C++ on the first bucket
    of different sizes). find_unused_parameters=False with a parameter that got no gradient:
    the next forward raises naming it and the fix (torch's "Expected to have finished
    reduction"), on every rank."""
    cs = [{"model": "small", "counts": [2, 2], "models_per_rank": True},
          {"model": "small", "counts": [2, 2], "cap": [1, 0.0001]},
          {"model": "alternating", "counts": [3, 3]}]
    with no_leaks():
        rows = launch.run(distlab_only, 2, args=(cs,), timeout=120)
    for rank, per in enumerate(rows):
        models, caps, unused = per
        for r in (models, caps):
            assert r["type"] == "RankMismatchError", (rank, r)
            assert "do not hold the same model or bucket settings" in r["error"]
            assert "seen at construction after" in r["error"] and r["seconds"] < 30
        assert "rank 1: parameter elements 49 (rank 0: 42)" in models["error"]
        assert "shapes/dtypes/settings CRC" in caps["error"]
        assert unused["type"] == "RuntimeError", (rank, unused)
        assert "b.weight, b.bias" in unused["error"]
        assert "find_unused_parameters=True" in unused["error"]


def test_a_peer_that_went_away_is_not_called_uneven_inputs():
    """Only a bound that ran out suggests uneven inputs; a closed connection names a failed or
    exited peer and a size mismatch names different collectives, each with the elapsed time."""
    peer = uneven_error(1, "allreduce of bucket 0 (2 parameters, 64 bytes)", 30.0,
                        RuntimeError("Connection closed by peer [127.0.0.1]:4242"), 0.02)
    text = str(peer)
    assert "allreduce of bucket 0 (2 parameters, 64 bytes) failed after 0.02 s" in text
    assert "did not complete" not in text and "within 30 s" not in text  # no bound ran out
    assert "another rank failed or exited" in text and "Likely cause: uneven" not in text
    size = uneven_error(0, "x", 30.0, RuntimeError(
        "Received data size doesn't match expected size"), 0.5)
    assert "different collectives" in str(size) and "Likely cause: uneven" not in str(size)
    assert "x failed after 0.50 s" in str(size)
    late = uneven_error(0, "x", 3.0, RuntimeError("Timed out waiting 3000ms for recv"), 3.0)
    assert "Likely cause: uneven inputs" in str(late)
    assert "x did not complete within 3 s: RuntimeError: Timed out" in str(late)
    assert "(after 3.00 s)" in str(late)
    assert [failure_kind(t) for t in ("Timed out", "Connection reset by peer",
                                      "size mismatch", "weird")] == \
        ["timeout", "peer", "mismatch", "timeout"]
