"""Read profile folders back (notebook 07): list them, load one, flatten rows into tables.

    profiles = list_profiles(Path("../results/profiles"))
    p = load_profile(profiles[0])
    p.part("collectives")["runs"][0]["rows"]
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["Profile", "list_profiles", "load_profile", "published"]


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

    def label(self) -> str:
        """Short legend label: folder name, device of the first GPU or ``CPU``."""
        env = self.part("env")
        gpus = env["facts"]["gpus"] if env else []
        return f"{self.name} ({gpus[0]['name'] if gpus else 'CPU'})"


def list_profiles(root: str | os.PathLike[str]) -> list[Path]:
    """Folders under ``root`` that hold a ``profile.json``, sorted by name ([] if none)."""
    base = Path(root)
    if not base.is_dir():
        return []
    return sorted(p for p in base.iterdir() if (p / "profile.json").is_file())


def load_profile(path: str | os.PathLike[str]) -> Profile:
    """Load ``path`` (a profile folder). Raises ``ValueError`` naming it when it is not one."""
    folder = Path(path)
    index_file = folder / "profile.json"
    if not index_file.is_file():
        raise ValueError(f"path={os.fspath(path)!r} is not a profile folder (no profile.json); "
                         "make one with: python -m distlab.profile --quick")
    index = json.loads(index_file.read_text())
    parts = {}
    for name, entry in index.get("parts", {}).items():
        f = folder / entry.get("file", f"{name}.json")
        if entry.get("file") and f.is_file():
            parts[name] = json.loads(f.read_text())
    return Profile(folder, index, parts)


def published() -> dict[str, Any]:
    """The published reference points shipped with the package (each with source and quote)."""
    text = resources.files("distlab.profile").joinpath("published.json").read_text()
    return json.loads(text)
