"""python -m distlab.bench ddp: option checks and one tiny run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers.paths import LIB

LIB = str(LIB)


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": LIB}
    return subprocess.run([sys.executable, "-m", "distlab.bench", "ddp", *args], env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("args,option", [(["--world-size", "1"], "--world-size"),
                                         (["--bucket-cap-mb", "0"], "--bucket-cap-mb"),
                                         (["--rounds", "0"], "--rounds")])
def test_bad_options_exit_2(args, option):
    r = _run(*args)
    assert r.returncode == 2 and option in r.stderr


def test_tiny_run_table_and_json(tmp_path):
    """With --join: overlap and torch DDP also run inside Join on the same even inputs, train
    to torch's parameters, and each cap gets the step-time ratio line; so do
    find_unused_parameters=True and a model with buffers (broadcast_buffers)."""
    out = tmp_path / "ddp.json"
    r = _run("--layers", "2", "--width", "64", "--bucket-cap-mb", "0.01,25", "--steps", "2",
             "--rounds", "1", "--join", "--json", str(out))
    assert r.returncode == 0, r.stderr
    data = json.loads(out.read_text())
    variants = [row["variant"] for row in data["rows"]]
    assert variants.count("torch") == 2 and variants.count("naive") == 1
    assert variants.count("overlap+join") == 2 and variants.count("torch+join") == 2
    assert all(row["wrong"] == 0 for row in data["rows"])
    assert "#wrong" in r.stdout and "provenance" in data
    assert set(data["join_vs_overlap"]) == set(data["torch_join_vs_torch"]) == {"0.01", "25.0"}
    assert all(v > 0 for v in data["join_vs_overlap"].values())
    assert r.stdout.count("Join on even inputs: step = ") == 2
    assert data["config"]["join"] is True
    # the new options' cost, distlab's beside torch's (their parameters equal torch's too)
    for option, pair in (("find_unused_parameters", ("overlap+unused", "torch+unused")),
                         ("broadcast_buffers", ("overlap+buffers", "torch+buffers"))):
        assert all(variants.count(v) == 2 for v in pair)
        cost = data["option_cost"][option]
        assert set(cost) == {"0.01", "25.0"}
        assert all(c["distlab"] > 0 and c["torch"] > 0 for c in cost.values())
        assert r.stdout.count(f"{option}: step = ") == 2
