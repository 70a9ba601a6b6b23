"""``python -m distlab.bench allreduce --check MODE``: the timed calls run with that peer check
(inline by default, as a user's call does; off times the plans as torch's built-in runs, with no
cross-rank check of the arguments)."""

from __future__ import annotations

import time

import pytest
import torch

from distlab.bench import allreduce as bench
from distlab.bench import allreduce_ranks as ranks
from distlab.bench.harness import build_parser
from distlab.bench.rounds import Fences
from distlab.report.jsonfile import read_json


def _case(seen: list[object]) -> ranks._Case:
    buf = torch.zeros(4)
    return ranks._Case("ring", "compiled", 4, 16, lambda t, check=True: seen.append(check),
                       buf, buf.clone())


@pytest.mark.parametrize("mode", ["inline", "gather", "off"])
def test_every_timed_call_runs_with_the_chosen_check(monkeypatch, mode: str) -> None:
    fences = Fences(sync=lambda: None, barrier=lambda: None, clock=time.perf_counter)
    monkeypatch.setattr(ranks, "rank_fences", lambda device: fences)
    seen: list[object] = []
    ranks._timed_rounds(0, [_case(seen)], None, iters=3, warmup=1,
                        device=torch.device("cpu"), progress=False, check=mode)
    assert seen == [mode] * 4


def test_the_default_is_what_a_call_does() -> None:
    assert bench.AllreduceConfig().check == "inline"
    assert "--check {inline,gather,off}" in build_parser(bench.BENCHMARK).format_help()


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
def test_a_run_says_its_check_and_stores_it(tmp_path, capsys) -> None:
    out = tmp_path / "r.json"
    code = bench.main(["-n", "2", "-b", "4K", "-e", "4K", "-a", "ring,builtin", "--check", "off",
                       "--iters", "1", "--warmup", "0", "--no-calibrate", "--quiet",
                       "--json", str(out)])
    assert code == 0
    assert "peer check off;" in capsys.readouterr().out
    assert read_json(out)["config"]["check"] == "off"
