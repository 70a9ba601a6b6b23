"""Notebook 07 opens this machine's newest profile, else the newest committed one, and says
which; machines are told apart by more than the host name (they are all "vm")."""

from __future__ import annotations

from pathlib import Path

import pytest

from distlab.profile.load import MachineKey, Profile, choose_profile, list_profiles, load_profile
from helpers.paths import PROFILES


def _fake(name: str, date: str, key: MachineKey, complete: bool = True) -> Profile:
    index = {"complete": complete, "provenance": {"host": key.host, "date": date,
                                                  "cpu_cores": key.cpu_cores},
             "parts": dict.fromkeys(("env", "transfers", "collectives", "ddp"), {})}
    facts = {"cpu_model": key.cpu_model, "cpu_cores": key.cpu_cores,
             "gpus": [{"name": g, "index": i, "memory_bytes": 1, "capability": "9.0"}
                      for i, g in enumerate(key.gpus)]}
    return Profile(Path(name), index, {"env": {"status": "ok", "facts": facts}})


CPU = MachineKey("vm", "AMD EPYC", 2, ())
GPU = MachineKey("vm", "Intel(R) Xeon(R) Processor", 16, ("NVIDIA H100 80GB HBM3",))


def test_this_machines_newest_profile_wins_over_newer_ones_of_others() -> None:
    ps = [_fake("cpu-old", "2026-11-01T00:00:00", CPU),
          _fake("cpu-new", "2026-11-02T00:00:00", CPU),
          _fake("gpu", "2026-11-30T00:00:00", GPU)]
    pick, why = choose_profile(ps, CPU)
    assert pick.name == "cpu-new" and "this machine's newest" in why and "cpu-new" in why
    pick, why = choose_profile(ps, GPU)
    assert pick.name == "gpu"


def test_without_a_profile_of_this_machine_the_newest_committed_one() -> None:
    other = MachineKey("vm", "ARM Neoverse", 64, ())
    ps = [_fake("a", "2026-11-01T00:00:00", CPU), _fake("b", "2026-11-03T00:00:00", GPU),
          _fake("c", "2026-11-05T00:00:00", CPU, complete=False)]
    pick, why = choose_profile(ps, other)
    assert pick.name == "b" and "no profile of this machine" in why   # c is incomplete
    with pytest.raises(ValueError, match="no complete profile"):
        choose_profile([ps[2]], other)


def test_the_committed_profiles_keys() -> None:
    keys = {p.name: MachineKey.of(load_profile(p)) for p in list_profiles(PROFILES)}
    assert keys["h100-2026-11-23"].gpus == ("NVIDIA H100 80GB HBM3",)
    assert keys["h100-2026-11-23"].host == keys["vm-2026-11-23"].host == "vm"  # same host name
    assert keys["h100-2026-11-23"] != keys["vm-2026-11-23"]


def test_a_profile_of_some_parts_only_is_not_chosen() -> None:
    full = _fake("full", "2026-11-01T00:00:00", CPU)
    full.index["parts"] = dict.fromkeys(("env", "transfers", "collectives", "ddp"), {})
    pinned = _fake("pinned-1core", "2026-11-02T00:00:00", CPU)   # --only env,collectives
    pinned.index["parts"] = dict.fromkeys(("env", "collectives"), {})
    pick, _ = choose_profile([full, pinned], CPU)
    assert pick.name == "full"
    committed = [load_profile(p) for p in list_profiles(PROFILES)]
    here_vm = MachineKey.of(next(p for p in committed if p.name == "vm-2026-11-23"))
    assert choose_profile(committed, here_vm)[0].name == "vm-2026-11-23"


def test_a_machine_key_named_in_the_environment_stands_in_for_this_machine(monkeypatch) -> None:
    from distlab.profile.load import MACHINE_KEY_ENV, machine_key_here

    monkeypatch.delenv(MACHINE_KEY_ENV, raising=False)
    real = machine_key_here()
    monkeypatch.setenv(MACHINE_KEY_ENV, GPU.to_json())
    assert machine_key_here() == GPU != real
    monkeypatch.setenv(MACHINE_KEY_ENV, "  ")
    assert machine_key_here() == real   # empty: this machine


_KEY = '{"host": "vm", "cpu_model": "x", '


@pytest.mark.parametrize("text", ["{", "[]", '{"host": "vm"}',
                                  _KEY + '"cpu_cores": "2", "gpus": []}',
                                  _KEY + '"cpu_cores": 2, "gpus": "H100"}',
                                  _KEY + '"cpu_cores": true, "gpus": []}'])
def test_a_bad_machine_key_in_the_environment_is_named(monkeypatch, text: str) -> None:
    from distlab.profile.load import MACHINE_KEY_ENV, machine_key_here

    monkeypatch.setenv(MACHINE_KEY_ENV, text)
    with pytest.raises(ValueError, match=MACHINE_KEY_ENV):
        machine_key_here()
