"""The runs of a verify grid (``python -m distlab.plan.verify.grid``), as plain data: a preset at
a sequence length and micro-batch, a recompute mode, a ZeRO stage and an AdamW implementation,
on one GPU. No torch here: the judge reads grids with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from distlab.plan.layout import Layout

__all__ = ["DEFAULT_GRID", "TOO_BIG", "GridCase", "parse_case"]


@dataclass(frozen=True)
class GridCase:
    """One run of the grid: a preset at ``seq_len`` tokens, ``micro_batch`` sequences (one
    microbatch per step), ``recompute``, ZeRO ``zero`` (3: FSDP2; 0: the model alone under
    autocast) and the AdamW ``optimizer``."""

    model: str
    seq_len: int
    micro_batch: int
    recompute: str = "none"
    zero: int = 3
    optimizer: str = "fused"

    @property
    def name(self) -> str:
        """E.g. ``"llama3.2-1b s4096 mb2 full"`` (``zero0``, ``foreach`` when not default)."""
        parts = [self.model, f"s{self.seq_len}", f"mb{self.micro_batch}", self.recompute]
        if self.zero != 3:
            parts.append(f"zero{self.zero}")
        if self.optimizer != "fused":
            parts.append(self.optimizer)
        return " ".join(parts)

    def layout(self) -> Layout:
        """The planner's :class:`~distlab.plan.layout.Layout` of this run."""
        return Layout(dp=1, zero=self.zero, micro_batch=self.micro_batch,
                      global_batch=self.micro_batch, recompute=self.recompute,
                      precision="fsdp-mixed")


def parse_case(text: str) -> GridCase:
    """A :class:`GridCase` from its :attr:`GridCase.name`."""
    words = text.split()
    if len(words) < 4 or not words[1].startswith("s") or not words[2].startswith("mb"):
        raise ValueError(f"case {text!r}: expected 'MODEL sSEQ mbN RECOMPUTE [zeroZ] "
                         "[foreach]'")
    zero, optimizer = 3, "fused"
    for w in words[4:]:
        if w.startswith("zero"):
            zero = int(w[4:])
        elif w in ("fused", "foreach"):
            optimizer = w
        else:
            raise ValueError(f"case {text!r}: unknown word {w!r}")
    return GridCase(words[0], int(words[1][1:]), int(words[2][2:]), words[3], zero, optimizer)


def _grid() -> tuple[GridCase, ...]:
    out: list[GridCase] = []
    for model, seqs in (("llama3.2-1b", ((4096, (1, 2, 4)), (8192, (1, 2)))),
                        ("llama3.2-3b", ((4096, (1, 2, 4)), (8192, (2,))))):
        for seq, mbs in seqs:
            for mb in mbs:
                for rc in ("none", "op", "full"):
                    out.append(GridCase(model, seq, mb, rc))
    out += [GridCase("llama3.2-1b", 2048, 8, "none"), GridCase("llama3.2-1b", 2048, 8, "full"),
            GridCase("llama3.2-1b", 4096, 2, "none", zero=0),
            GridCase("llama3.2-1b", 4096, 2, "full", zero=0),
            GridCase("llama3.2-1b", 4096, 2, "full", optimizer="foreach"),
            GridCase("llama3.2-1b", 4096, 2, "none", optimizer="foreach")]
    return tuple(out)


DEFAULT_GRID = _grid()
"""Llama 3.2 1B and 3B at 4k and 8k tokens, micro-batches 1-4, recompute none / per-op /
full, FSDP2 on one GPU; a few with ZeRO 0 (autocast, no FSDP) and foreach AdamW."""

TOO_BIG = (GridCase("llama3-8b", 2048, 1, "op"), GridCase("llama3-8b", 4096, 1, "full"))
"""Llama 3 8B on one GPU: its fp32 states alone take 120 GiB, so an 80 GB card cannot hold it
and a 141 GB one only barely (the planner's verdict checked where a run fails)."""
