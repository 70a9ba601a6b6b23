"""env part: CPU, memory, GPUs, interconnect, PCIe links and library versions (no timing)."""

from __future__ import annotations

from distlab.envinfo import machine_facts
from distlab.profile.parts import PartContext, PartResult

__all__ = ["run"]


def run(ctx: PartContext) -> PartResult:
    """Collect :func:`distlab.envinfo.machine_facts`; GPU facts missing here go to ``skipped``."""
    with ctx.timed("env/facts", "machine_facts"):
        facts = machine_facts()
    skipped = [{"what": "env/" + note.split(":")[0].split()[-1].lower(), "why": note}
               for note in facts["notes"]]
    return PartResult("env", payload={"facts": facts}, skipped=skipped)
