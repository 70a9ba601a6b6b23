"""The AMD boxes and NICs the RCCL model knows, each constant with its source (how the model
fares on each, ``python -m distlab.rccl --boxes``, is :mod:`distlab.evidence.rccl.inventory`).

A box is 8 GPUs fully connected by xGMI (AMD Infinity Fabric): each GPU has one link to each of
its 7 peers. Two speeds matter and differ: the link's speed in AMD's specification, and the one
RCCL's topology credits it with (``GFX94X_XGMI_WIDTH`` / ``GFX95X_XGMI_WIDTH``, 48 GB/s per link,
``src/graph/topo.h``), which is what its tuning reads; the execution model
(:mod:`distlab.rccl.execution`) fits what a link moves on published runs instead. Across nodes
each GPU has one 400 Gb/s NIC (50 GB/s): the model prices ConnectX-7, Broadcom Thor2 and AMD
Pollara 400 alike, at :data:`~distlab.rccl.execution.NIC_GBPS`, and says which of them a published
table ran on. Sources are those of ``docs/research/2026-11-27-rccl.md`` section 3 (with its
caveats).
Units: GB/s (1e9 bytes per second) per direction unless a name says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from distlab.gpus import gpus_of_library
from distlab.rccl.tables import GPU_ARCHS
from distlab.rccl.tuning import RCCL_XGMI_LINK_GBPS, XGMI_LINK_SPEC_GBPS

__all__ = ["AMD_BOXES", "AMD_NICS", "NOT_PRICED", "AmdBox", "AmdNic"]


def _registry_gpu(box: str) -> tuple[str, str]:
    """The GPU (its product name) and architecture the one GPU registry puts in ``box``."""
    (g,) = (g for g in gpus_of_library("rccl") if g.box == box)
    return g.product, g.architecture


def _published_with(nic: str) -> str:
    """The GPUs whose clusters were published with ``nic`` (their registry default network)."""
    return ", ".join(g.product for g in gpus_of_library("rccl") if g.default_network == nic)


@dataclass(frozen=True)
class AmdBox:
    """One 8-GPU AMD box.

    Attributes:
        key: the box's name here; gpu: the GPU as published tables name it.
        arch: the GPU architecture RCCL keys its tuning tables on (``gfx942``, ``gfx950``).
        links: xGMI links per GPU (one to each peer).
        link_gbps: one link's speed per direction in AMD's specification (half the
            bidirectional figure), GB/s.
        priced: whether :mod:`distlab.rccl` holds RCCL's tables for ``arch`` and times some
            of its allreduces.
        source: where each constant comes from.
        priced_where: ``""`` when every size RCCL's choice leads to a priced path is timed,
            else where the box is priced (every box is priced on one node and many now).
    """

    key: str
    gpu: str
    arch: str
    links: int
    link_gbps: float
    priced: bool
    source: str
    priced_where: str = ""

    def __post_init__(self) -> None:
        if GPU_ARCHS.get(self.gpu) != self.arch:
            raise ValueError(f"box {self.key}: {self.gpu} is {GPU_ARCHS.get(self.gpu)} in "
                             f"GPU_ARCHS, not {self.arch}")

    @property
    def rccl_link_gbps(self) -> float:
        """What RCCL's topology credits one link with, GB/s
        (:data:`~distlab.rccl.tuning.RCCL_XGMI_LINK_GBPS`)."""
        return RCCL_XGMI_LINK_GBPS[self.arch]


AMD_BOXES: tuple[AmdBox, ...] = (
    AmdBox("mi300x_8", *_registry_gpu("mi300x_8"), 7, XGMI_LINK_SPEC_GBPS["gfx942"], True,
           "AMD ROCm blog 'MI300X RCCL and xGMI' (rocm.blogs.amd.com, 2025-03-02): seven x16 "
           "Infinity Fabric links, 128 GB/s bidirectional (64 GB/s each way) per link, "
           "fully connected; RCCL src/graph/topo.h GFX94X_XGMI_WIDTH 48.0 per link"),
    AmdBox("mi325x_8", *_registry_gpu("mi325x_8"), 7, XGMI_LINK_SPEC_GBPS["gfx942"], True,
           "AMD Instinct MI325X: seven Infinity Fabric links, the same CDNA 3 links as MI300X "
           "(a per-link figure of its own is not published in the sources found); RCCL: gfx942, "
           "GFX94X_XGMI_WIDTH 48.0"),
    AmdBox("mi355x_8", *_registry_gpu("mi355x_8"), 7, XGMI_LINK_SPEC_GBPS["gfx950"], True,
           "Hot Chips 2025 write-ups (third-party, not AMD's datasheet): seven Infinity Fabric "
           "links of about 153.6 GB/s bidirectional; RCCL src/graph/topo.h GFX95X_XGMI_WIDTH "
           "48.0 (the same credit as gfx942); RCCL 2.26.6 (develop 6ade5065) tuning_model_6 "
           "for the choice; the ring across nodes timed as NIC-bound, one node at the MI300X "
           "fit's xGMI rates x 1.2 (this link figure over MI300X's)"),
)
"""The boxes, in the order ``--boxes`` lists them."""


@dataclass(frozen=True)
class AmdNic:
    """One NIC users put beside these GPUs (one per GPU): its line rate (Gb/s), what RCCL sees
    (GB/s), the boxes it was published with, and the source."""

    key: str
    name: str
    gbit: float
    seen_with: str
    source: str

    @property
    def gbps(self) -> float:
        """GB/s: the line rate / 8."""
        return self.gbit / 8


AMD_NICS: tuple[AmdNic, ...] = (
    AmdNic("cx7", "NVIDIA ConnectX-7 400G", 400.0, _published_with("cx7"),
           "AMD AAC10 MI300X cluster (hisohara/ai-scripts rccl smoketest: 8 mlx5 RoCE ports per "
           "node); AMD's MLPerf Training v4.1 8 x MI300X system description (MT2910, ConnectX-7)"),
    AmdNic("thor2", "Broadcom Thor2 400G", 400.0, _published_with("thor2"),
           "AMD AAC11 MI325X cluster (bnxt_re RoCE ports, hisohara/ai-scripts); RCCL CHANGELOG "
           "2.20.5 known issue naming Broadcom Thor-2 NICs"),
    AmdNic("pollara", "AMD Pensando Pollara 400", 400.0, _published_with("pollara"),
           "amd.com Pollara 400 AI NIC page ('up to 400 Gbps', PCIe Gen5 x16); AMD AAC14 MI355X "
           "cluster through the ANP net plugin (hisohara/ai-scripts); RCCL tuning_model_8 when "
           "the primary NIC is an AI NIC (rocm-systems)"),
)
"""The NICs, each priced at :data:`~distlab.rccl.execution.NIC_GBPS` GB/s."""

NOT_PRICED: tuple[str, ...] = (
    "gfx950 (MI350X, MI355X) on one node rests on a third-party link figure (MI300X's fitted "
    "xGMI rates x 1.2, MI300X's fixed costs); the one held-out MI355X table with sizes below 8 "
    "MiB, one process driving the 8 GPUs (-g 8), runs 33-48 us there where the model says "
    "15-48 us: a single host thread launching eight kernels, which the RCCL model does not "
    "price (no ROCm launch cost is calibrated; NCCL's, 5.2 us per GPU on CUDA hosts, would "
    "make 42 us)",
    "RCCL's tree across MI300X / MI325X nodes takes the MI355X fit: the one citable gfx942 "
    "table with tree sizes (2 x 8 MI300X, RCCL 2.22.3) has a 220 us floor and runs 0.9-5.5x "
    "the model there; a 2 x 8 MI308X run at RCCL 2.27.7 (no citable source) starts at 41 us, "
    "as the MI355X clusters do, so that table is not followed",
    "RCCL's tree across MI355X nodes is fitted on two 2 x 8 MI355X clusters that differ by up "
    "to 1.5x at 4-64 MiB (one runs AMD's ANP plugin, the other two queue pairs per connection "
    "and no GPU-memory flush: which setting makes the difference is not known); each judged "
    "on the other's fit misses a 12% median. Beyond two nodes its fixed cost grows as RCCL's "
    "tree latency, not judged; LL / LL128 rings across nodes",
    "a one-node ring in LL (MSCCL off, small sizes); collectives other than allreduce",
    "the NIC model: every NIC at 50 GB/s with one fitted efficiency (fitted over ConnectX-7 "
    "class, judged over Broadcom); a NIC's own latency is not separated",
)
"""What the RCCL model cannot price, one line each."""
