"""Read profile folders back (notebook 07): list them, load one, flatten rows into tables.

    profiles = list_profiles(Path("../results/profiles"))
    p = load_profile(profiles[0])
    p.part("collectives")["runs"][0]["rows"]
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from distlab.bench.ddp import with_overlap
from distlab.envinfo import cpu_model, environment_report
from distlab.evidence.nccl.published import published_tables
from distlab.profile.parts import PART_NAMES
from distlab.report.jsonfile import read_json

__all__ = ["MACHINE_KEY_ENV", "MachineKey", "Profile", "choose_profile", "list_profiles",
           "load_profile", "machine_key_here", "published"]


@dataclass
class Profile:
    """A loaded profile folder: its index (``profile.json``) and the parts' JSON documents."""

    path: Path
    index: dict[str, Any]
    parts: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The folder name (``<host>-<date>[-quick]``)."""
        return self.path.name

    @property
    def complete(self) -> bool:
        return bool(self.index.get("complete"))

    def part(self, name: str) -> dict[str, Any] | None:
        """Part ``name``'s document when it ran ok, else None."""
        doc = self.parts.get(name)
        return doc if doc is not None and doc.get("status") == "ok" else None

    def allreduce_runs(self) -> list[dict[str, Any]]:
        """The collectives part's allreduce runs (each of >= 2 ranks; [] without the part)."""
        part = self.part("collectives")
        return list(part["runs"]) if part else []

    @property
    def rehearsal(self) -> str | None:
        """The fake box a rehearsal ran on (``--rehearse``), or None for a measured profile."""
        return self.index.get("rehearsal")

    def label(self) -> str:
        """Short legend label: folder name, device of the first GPU or ``CPU``."""
        env = self.part("env")
        gpus = env["facts"]["gpus"] if env else []
        return f"{self.name} ({gpus[0]['name'] if gpus else 'CPU'})"


@dataclass(frozen=True)
class MachineKey:
    """What tells machines apart in a profile (host names alone do not: cloud VMs are all "vm"):
    host name, CPU model, core count and GPU names."""

    host: str
    cpu_model: str
    cpu_cores: int
    gpus: tuple[str, ...]

    @classmethod
    def of(cls, profile: Profile) -> MachineKey:
        """The key of the machine a profile was measured on (its provenance and env part)."""
        prov = profile.index.get("provenance", {})
        env = profile.parts.get("env", {}).get("facts", {})
        return cls(str(prov.get("host", "")), str(env.get("cpu_model", "")),
                   int(env.get("cpu_cores") or prov.get("cpu_cores") or 0),
                   tuple(g["name"] for g in env.get("gpus", [])))

    def to_json(self) -> str:
        """The key as :data:`MACHINE_KEY_ENV` takes it."""
        return json.dumps({"host": self.host, "cpu_model": self.cpu_model,
                           "cpu_cores": self.cpu_cores, "gpus": list(self.gpus)})


MACHINE_KEY_ENV = "DISTLAB_MACHINE_KEY"
"""Environment variable that stands in for this machine's key: a JSON object with ``host``,
``cpu_model``, ``cpu_cores`` and ``gpus`` (a list of names). Read a notebook as the machine of
another profile would (the tests run notebook 07 as a machine that measured a committed profile
and as one that measured none)."""


def machine_key_here() -> MachineKey:
    """This machine's :class:`MachineKey` (host name, CPU model, cores, GPU names), or the key
    :data:`MACHINE_KEY_ENV` names (``ValueError`` when it is not such a JSON object)."""
    named = os.environ.get(MACHINE_KEY_ENV, "").strip()
    if named:
        return _machine_key_from_json(named)
    rep = environment_report()
    return MachineKey(socket.gethostname(), cpu_model(), rep.cpu_cores,
                      tuple(d.name for d in rep.cuda_devices))


def _machine_key_from_json(text: str) -> MachineKey:
    """:data:`MACHINE_KEY_ENV`'s value as a :class:`MachineKey`."""
    fields = ("host", "cpu_model", "cpu_cores", "gpus")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{MACHINE_KEY_ENV} must be a JSON object, got {text!r} ({exc})") from None
    if not isinstance(obj, dict) or set(obj) != set(fields):
        raise ValueError(f"{MACHINE_KEY_ENV} must be a JSON object with exactly the keys "
                         f"{list(fields)}, got {text!r}")
    host, cpu, cores, gpus = (obj[f] for f in fields)
    if not (isinstance(host, str) and isinstance(cpu, str) and isinstance(cores, int)
            and not isinstance(cores, bool) and cores >= 0 and isinstance(gpus, list)
            and all(isinstance(g, str) for g in gpus)):
        raise ValueError(f"{MACHINE_KEY_ENV}: host and cpu_model are strings, cpu_cores an "
                         f"integer >= 0, gpus a list of names; got {text!r}")
    return MachineKey(host, cpu, cores, tuple(gpus))


#: the parts a whole-machine profile holds: every part but ``gpus`` (the GPU-to-GPU matrix, every
#: GPU fed at once), which measures nothing on a box with fewer than two GPUs
WHOLE_MACHINE_PARTS = tuple(p for p in PART_NAMES if p != "gpus")


def choose_profile(profiles: list[Profile], here: MachineKey) -> tuple[Profile, str]:
    """The profile a reader of this machine wants first, and one line saying why: this
    machine's newest complete profile when there is one, else the newest complete committed one
    (newest = latest provenance date). A profile made with ``--only`` (its index lists fewer
    parts than :data:`WHOLE_MACHINE_PARTS`, e.g. the collectives-only profiles of this box
    pinned to 1 or 2 cores) is not chosen: the reader wants every part; nor is a rehearsal
    (``--rehearse``: its GPUs were host memory). ``ValueError`` when there is no complete
    profile."""
    done = [p for p in profiles if p.complete and _every_part(p) and not p.index.get("rehearsal")]
    if not done:
        raise ValueError("no complete profile to choose from: run python -m distlab.profile")

    def newest(ps: list[Profile]) -> Profile:
        return max(ps, key=lambda p: (p.index["provenance"].get("date", ""), p.name))
    mine = [p for p in done if MachineKey.of(p) == here]
    if mine:
        pick = newest(mine)
        return pick, (f"{pick.name}: this machine's newest profile "
                      f"({pick.index['provenance'].get('date', '?')})")
    pick = newest(done)
    return pick, (f"{pick.name}: no profile of this machine, so the newest committed one "
                  f"({pick.index['provenance'].get('date', '?')}, {pick.label()})")


def _every_part(profile: Profile) -> bool:
    """Whether the profile ran every part of :data:`WHOLE_MACHINE_PARTS`."""
    return set(WHOLE_MACHINE_PARTS) <= set(profile.index["parts"])


def list_profiles(root: str | os.PathLike[str]) -> list[Path]:
    """Folders under ``root`` that hold a ``profile.json``, sorted by name ([] if none)."""
    base = Path(root)
    if not base.is_dir():
        return []
    return sorted(p for p in base.iterdir() if (p / "profile.json").is_file())


def load_profile(path: str | os.PathLike[str]) -> Profile:
    """Load ``path`` (a profile folder). Raises ``ValueError`` naming it when it is not one, and
    :class:`~distlab.report.jsonfile.SchemaError` when a file of it is of another results schema.

    The ddp part's ``overlap_fraction`` of every row is derived here from the stored exposed
    times (:func:`distlab.bench.ddp.with_overlap`), whatever value the file holds (a stored
    value may be ``1 - exposed / modelled allreduce time``, which is not an overlap: it depends
    on the model's error). The files are not changed."""
    folder = Path(path)
    index_file = folder / "profile.json"
    if not index_file.is_file():
        raise ValueError(f"path={os.fspath(path)!r} is not a profile folder (no profile.json); "
                         "make one with: python -m distlab.profile --quick")
    index = read_json(index_file)
    parts = {}
    for name, entry in index["parts"].items():
        f = folder / entry.get("file", f"{name}.json")
        if entry.get("file") and f.is_file():
            parts[name] = read_json(f)
    ddp = parts.get("ddp")
    if ddp is not None and ddp.get("rows"):
        ddp["rows"] = with_overlap(ddp["rows"])
    return Profile(folder, index, parts)


def published() -> dict[str, Any]:
    """The published reference points shipped with the package (each with source and quote):
    the profile's own (``profile/published.json``: ``allreduce``, ``transfers``), then the
    tables the NCCL model is fitted and judged on, which that model owns
    (:func:`distlab.evidence.nccl.published.published_tables`)."""
    text = resources.files("distlab.profile").joinpath("published.json").read_text()
    return {**json.loads(text), **published_tables()}
