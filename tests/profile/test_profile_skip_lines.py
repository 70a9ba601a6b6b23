"""What the profile says about steps it skipped: each reason once, a part skipped whole once."""

from __future__ import annotations

from distlab.profile import gpus_part
from distlab.profile.cli import skip_lines
from distlab.profile.parts import PartContext, PartResult

WHY = "no CUDA device (torch.cuda.is_available() is False)"


def test_steps_skipped_for_one_reason_share_a_line() -> None:
    result = PartResult("gpus", "skipped", reason=WHY,
                        skipped=[{"what": "gpus/peer", "why": WHY},
                                 {"what": "gpus/host-to-all", "why": WHY},
                                 {"what": "gpus/other", "why": "another reason"}])
    assert skip_lines(result) == [f"skipped gpus/peer, gpus/host-to-all: {WHY}",
                                  "skipped gpus/other: another reason"]
    assert skip_lines(PartResult("env")) == []


def test_the_gpus_part_without_a_gpu_says_its_reason_once() -> None:
    """Here (no CUDA) or on a GPU box with peer copies off: a reason is never repeated."""
    result = gpus_part.run(PartContext(quick=True, progress=False))
    reasons = [r.strip() for r in result.reason.split(";")] if result.reason else []
    assert len(reasons) == len(set(reasons)), result.reason
    lines = skip_lines(result)
    assert len(lines) == len({s["why"] for s in result.skipped})
