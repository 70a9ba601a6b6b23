"""The compiled plan executor: bitwise equal to the Python executor on every plan, its encoding,
its errors, and the one-line fallback where it cannot be built."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap

import pytest

from distlab import launch
from distlab.collectives import ALGORITHMS, PLANS, plan_options
from distlab.collectives.plan.schedule import Schedule, Step, Transfer
from distlab.collectives.runtime import compiled
from distlab.collectives.runtime.rank_plan import rank_plan
from helpers.collectives_targets import executors_agree_worker

DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "int64")
OPS = ("sum", "prod", "max", "min", "avg")


def _options(collective: str, algorithm: str, p: int, rng: random.Random) -> dict:
    opts = plan_options(collective, algorithm)
    out: dict = {}
    if "pieces" in opts and rng.random() < 0.5:
        out["pieces"] = rng.randint(1, 4)
    if "segment_size" in opts:
        out["segment_size"] = rng.randint(1, 9)
    if "group_size" in opts:
        out["group_size"] = rng.choice([d for d in range(1, p + 1) if p % d == 0])
    return out


def random_cases(p: int, seed: int, n: int) -> list[dict]:
    """``n`` cases for a group of ``p`` ranks, drawn with ``seed``: every allreduce algorithm
    and every other collective's algorithms in turn, each with a random dtype, op (``avg`` on
    floating dtypes only), root, options, size (0, 1 or up to 3000, odd ones included) and one
    in five on the batched (NCCL-style) path."""
    rng = random.Random(seed)
    pairs = [("all_reduce", a) for a in sorted(ALGORITHMS)]
    pairs += [(c, a) for c, algos in sorted(PLANS.items()) if c != "all_reduce"
              for a in sorted(algos)]
    cases = []
    for i in range(n):
        c, algo = pairs[(i + seed) % len(pairs)]
        dtype = rng.choice(DTYPES)
        ops = [o for o in OPS if o != "avg" or dtype in ("float16", "bfloat16", "float32",
                                                          "float64")]
        op = rng.choice(ops) if c in ("all_reduce", "reduce", "reduce_scatter") else "sum"
        m = rng.choice([0, 1, rng.randint(2, 3000)]) if c == "all_reduce" else \
            rng.choice([1, rng.randint(2, 700)])
        cases.append({"collective": c, "algorithm": algo, "dtype": dtype, "op": op, "m": m,
                      "root": rng.randrange(p) if "root" in plan_options(c, algo) else 0,
                      "options": _options(c, algo, p, rng),
                      "batched": rng.random() < 0.2 and c != "barrier"})
    return cases


@pytest.mark.multiprocess
@pytest.mark.compiler
def test_both_executors_agree_bitwise_on_every_plan() -> None:
    """8 real gloo ranks: groups of 1 to 8 ranks (and {1, 3, 6}, whose group ranks are not its
    global ranks), each running random cases of every algorithm of every collective on both
    executors from the same inputs; every bit of every result must agree."""
    assert compiled.available(), compiled.status()
    groups = [list(range(k)) for k in range(1, 9)] + [[1, 3, 6]]
    cases = [random_cases(len(g), seed, 28) for seed, g in enumerate(groups)]
    out = launch.run(executors_agree_worker, 8, args=(groups, cases), timeout=400)
    for rank, res in enumerate(out):
        assert res["status"] == "compiled", res["status"]
        assert res["sees_one_bit"]
        assert res["ran"] == sum(len(c) for g, c in zip(groups, cases, strict=True) if rank in g)
        assert not res["differ"], f"rank {rank}: {res['differ'][:2]}"
        assert res["errors"] == 0, f"rank {rank}: {res['errors']} cases raised on both"


def _tiny_plan() -> Schedule:
    return Schedule("demo", 2, 6, (
        Step((Transfer(0, 1, 0, 3, "reduce"), Transfer(1, 0, 3, 6, "reduce")), "rs"),
        Step((Transfer(1, 0, 0, 3, "copy"), Transfer(0, 1, 3, 6, "copy")), "ag")))


def test_encoding_is_the_layout_the_executor_reads() -> None:
    plan = rank_plan(_tiny_plan(), 0)
    enc = compiled.encode(plan).tolist()
    assert enc[:2] == [2, plan.scratch]
    s0, s1 = plan.steps
    head0 = [s0.index, s0.sends_first_needed, len(s0.fill), len(s0.sends), len(s0.recvs)]
    assert enc[2:7] == head0 == [0, 1, 0, 1, 1]
    # step 0: send [0, 3) to rank 1 in place; receive [3, 6) into the workspace and reduce
    assert enc[7:15] == [1, 0, -1, 1, 0, 3, 1, 0]
    recv = s0.recvs[0]
    assert enc[15:23] == [1, 0, recv.offset, 1, 3, 6, 1, 0]
    assert len(enc) == 23 + 5 + 8 + 8
    if compiled.available():
        cp = compiled.compiled_plan(plan)
        assert (cp.num_steps, cp.scratch) == (2, plan.scratch)
        assert compiled.compiled_plan(plan) is cp  # parsed once per plan


def test_bad_executor_and_traced_compiled_calls_are_errors() -> None:
    from distlab.collectives.runtime.execute import uses_compiled
    from distlab.timeline import Timeline

    with pytest.raises(ValueError, match=r"executor must be one of \['auto', 'compiled', "
                                         r"'python'\], got 'fast'"):
        compiled.check_executor("fast")
    with pytest.raises(ValueError, match="executor='compiled' .* records no step spans"):
        uses_compiled("compiled", Timeline())
    assert uses_compiled("auto", Timeline()) is False  # a traced call runs the Python steps
    assert uses_compiled("python", None) is False


def test_step_errors_name_their_step() -> None:
    err = compiled.step_error(RuntimeError("boom distlab-step:3:Connection closed by peer"))
    assert err is not None and err.index == 3 and str(err) == "Connection closed by peer"
    assert compiled.step_error(RuntimeError("distlab-step:-1:timed out")).index == -1
    assert compiled.step_error(RuntimeError("some other failure")) is None
    assert compiled.timeout_ms(None) == 0


_FALLBACK_SCRIPT = textwrap.dedent("""
    import torch
    from distlab import launch
    import distlab.collectives as C
    from distlab.collectives.runtime import compiled

    def rank_fn(rank, world_size):
        t = torch.arange(5.0) + rank
        C.all_reduce(t, algorithm="ring")
        return compiled.status(), t.tolist()

    if __name__ == "__main__":
        for status, values in launch.run(rank_fn, 2, timeout=120):
            assert status.startswith("python (") and values == [1.0, 3.0, 5.0, 7.0, 9.0], status
        print("ok")
""")


@pytest.mark.multiprocess
@pytest.mark.compiler
def test_a_failed_build_says_so_in_one_line_and_runs_python(tmp_path) -> None:
    """No compiler (``CXX`` names a missing one) and an empty extensions folder: every process
    says so in one line on stderr and the collective still runs, on the Python executor."""
    script = tmp_path / "fallback.py"
    script.write_text(_FALLBACK_SCRIPT)
    env = {**os.environ, "CXX": str(tmp_path / "no-such-c++"),
           "DISTLAB_EXTENSIONS_DIR": str(tmp_path / "ext")}
    env.pop("DISTLAB_EXECUTOR", None)
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "ok"
    lines = [ln for ln in done.stderr.splitlines() if "compiled plan executor" in ln]
    # a rank whose peer's failing build holds the lock for more than SAY_WAIT_AFTER_S (a busy
    # machine) says it waits: the one other line allowed
    said = [ln for ln in lines if not ln.startswith("distlab: waiting for ")]
    assert len(said) == 2, done.stderr  # one line from each rank process, nothing else
    assert all(ln.startswith("distlab: the compiled plan executor could not be built (")
               and ln.endswith("collectives run on the Python executor") for ln in said)
    assert len(lines) - len(said) <= 1, done.stderr
    assert "Traceback" not in done.stderr


def test_distlab_executor_python_turns_it_off(monkeypatch) -> None:
    state = dict(compiled._STATE)
    try:
        compiled._STATE.update(module=None, error=None)
        monkeypatch.setenv("DISTLAB_EXECUTOR", "python")
        assert not compiled.available()
        assert compiled.status() == "python (DISTLAB_EXECUTOR=python)"
        with pytest.raises(RuntimeError, match="not available here: DISTLAB_EXECUTOR=python"):
            compiled.compiled_plan(rank_plan(_tiny_plan(), 0))
    finally:
        compiled._STATE.clear()
        compiled._STATE.update(state)
