"""env part: CPU, memory, GPUs, interconnect, PCIe links and library versions (no timing)."""

from __future__ import annotations

from distlab.envinfo import machine_facts
from distlab.profile.parts import PartContext, PartResult
from distlab.transfers.gpu_box import REHEARSAL_BOXES
from distlab.transfers.gpu_topology import FAKE_TOPOLOGIES

__all__ = ["run"]


def run(ctx: PartContext) -> PartResult:
    """Collect :func:`distlab.envinfo.machine_facts`; GPU facts missing here go to ``skipped``.
    Under ``--rehearse BOX`` the payload also holds ``rehearsal``: the box and the fake
    ``nvidia-smi topo -m`` every multi-GPU part reads (the facts stay this machine's)."""
    with ctx.timed("env/facts", "machine_facts"):
        facts = machine_facts()
    skipped = [{"what": "env/" + note.split(":")[0].split()[-1].lower(), "why": note}
               for note in facts["notes"]]
    payload: dict[str, object] = {"facts": facts}
    if ctx.rehearse:
        payload["rehearsal"] = {"box": ctx.rehearse,
                                "gpu_topology": FAKE_TOPOLOGIES[REHEARSAL_BOXES[ctx.rehearse][0]]()}
    return PartResult("env", payload=payload, skipped=skipped)
