"""The NCCL constants that changed between 2.18 and 2.30, per version.

NCCL's tuning model (:mod:`~distlab.nccl.tuning`) and its execution
(:mod:`~distlab.nccl.execution`) are written from NVIDIA/nccl ``v2.28.9-1``. The
published tables were measured with older NCCLs, and what NCCL chooses and how fast it runs moved
between them. :class:`NcclConstants` holds, per release, what differs for one node (every value
read from ``git show <tag>:<file>``; file and function beside each field):

========================== ======== ======== ======== ======== ======== ======== ======== ========
field                      2.18.5   2.20.5   2.24.3   2.26.2   2.27.5   2.28.9   2.29.7   2.30.7
========================== ======== ======== ======== ======== ======== ======== ======== ========
NVLS latency (us)          23 (bas) 23 (hw)  25       25       25       25       25       25
Tree Simple base (us)      0        0        8.4      8.4      8.4      8.4      8.4      8.4
Tree Simple hop NVL/PCI    4 / 6    28 / 28  4 / 4    4 / 4    4 / 4    4 / 4    4 / 4    4 / 4
Ring LL busbw factor       1/4      1/4      1/2      1/2      1/2      1/2      1/2      1/2
LL max busbw, Hopper       87.7     87.7     141      141      141      141      141      141
Blackwell row              no       no       no       yes      yes      yes      yes      yes
NVLS bandwidth             generic  min(i,o) min(i,o) min(i,o) min(i,o) effic.   effic.   effic.
LL128 default arches       70-90    70-90    70-90    70-100   >= 70    >= 70    >= 70    >= 70
MAXCHANNELS                32       32       32       64       64       64       64       64
NVLS needs GPUs            >= 3     >= 3     >= 3     >= 3     >= 3     >= 2     >= 2     >= 2
Blackwell ring LL128 [2]   -        -        -        73.4     73.4     73.4     40       40
sm100 intra speed 45 [3]   no       no       no       no       no       no       yes      yes
sm100 inter speeds [3]     96, 48   96, 48   96, 48   96, 48   96, 48   96, 48   96,80,48 96,86,80
Blackwell NVLS-Tree N4 [2] -        -        -        43.8     43.8     43.8     43.8     80
NVLS-Tree tree corr. [4]   no       no       no       no       no       no       yes      yes
NVLS-Tree net hop (us) [5] 19       14       14       14       14       20.9     20.9     20.9
========================== ======== ======== ======== ======== ======== ======== ======== ========

70-90 / 70-100: compute capability 70, 80, 90 (and 100 in 2.26.2; ``tuning.cc``'s switch).

[2] ``perChMaxRingLL128Bws`` / ``perChMaxNVLSTreeBws`` Blackwell rows (``tuning.cc``), GB/s per
    channel: ring LL128 ``{2*36.7, 34.6, 2*36.7}`` (N1/N2/N4) up to 2.28.9, ``{40, 40, 40}`` from
    2.29.7; NVLS-Tree ``{0, 96, 43.8}`` up to 2.29.7, ``{0, 96, 80}`` in 2.30.7.
[3] ``sm100SpeedArrayIntra`` / ``sm100SpeedArrayInter`` (``src/graph/search.cc``): 2.29.7 adds
    45 GB/s to the intra table and 80 to the inter table, 2.30.7 adds 86 to the inter table.
    Before 2.26 Blackwell GPUs read the 2.28.9 tables here (not checked per release).
[4] ``ncclTopoGetAlgoTime``: from 2.29.7 NVLS-Tree's bandwidth takes ``treeCorrectionFactor``
    (now 24 entries) on compute capability >= 100 with an x86 CPU.
[5] ``hwLat[NCCL_HW_NET][NCCL_ALGO_NVLS_TREE][NCCL_PROTO_SIMPLE]`` (``tuning.cc``): the network
    hop of NVLS-Tree's latency ``intra + 2 * log2(nNodes) * interLat`` across nodes: 19 in
    2.18.5, 14 from 2.20.5 to 2.27.5, 20.9 from 2.28.9 (e.g. ``git show v2.26.2-1:
    src/graph/tuning.cc`` line 141, ``v2.28.9-1`` line 165). Its intra term is NVLS's own
    latency (``nvls_latency_us``: ``baseLat`` 23 in 2.18.5, ``hwLat[NVLINK][NVLS_TREE]`` 23 in
    2.20.5 and 25 from 2.24.3).

Everything else ``ncclTopoTuneModel`` reads (base and hop latencies, ``llMaxBws``, the Hopper
and Ampere rows, ``nvlsEfficiency``, ``MAXCHANNELS``, ``NCCL_MAX_NVLS_ARITY``, the NVLS channel
counts of ``src/transport/nvls.cc``, ``SM*_NVLINK_BW``) is the same in 2.28.9, 2.29.7 and 2.30.7
(``git diff v2.28.9-1 v2.30.7-1`` of ``tuning.cc``, ``search.cc``, ``topo.h``, ``device.h``,
``nvls.cc``, read with whitespace removed: 2.30 reformatted the files).

**Releases the model does not hold.** :func:`resolve_nccl_version` prices a release with the
newest modelled release not newer than it (2.25.1 with 2.24.3, 2.31.0 with 2.30.7), and one older
than every modelled release (2.17.1) with the oldest, 2.18.5; each time it says so in one line
(:attr:`ResolvedVersion.note`; :func:`nccl_constants` also issues it as a
:class:`NcclReleaseWarning`). It never refuses a well-formed release: the constants move little
between releases, and an answer with its caveat is more use than none.

Not modelled per version (stated, not NCCL's): the topology search (``src/graph/search.cc``) is
the 2.28.9 one for every version but for the sm100 speed tables above; the multi-node terms are
the 2.28.9 ones but for the Blackwell rows and NVLS-Tree's latency above.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from distlab.vocabulary import NcclRelease, nccl_release

__all__ = ["DEFAULT_NCCL_VERSION", "NCCL_CONSTANTS", "NcclConstants", "NcclReleaseWarning",
           "ResolvedVersion", "constants_or_none", "nccl_constants", "release_key",
           "resolve_nccl_version"]

#: ``sm100SpeedArrayIntra`` / ``sm100SpeedArrayInter`` (``src/graph/search.cc``), GB/s per channel.
SM100_INTRA_2_28 = (90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0)
SM100_INTRA_2_29 = (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0)
_INTER_TAIL = (48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4,
               1.2, 0.24, 0.12)
SM100_INTER_2_28 = (96.0, *_INTER_TAIL)
SM100_INTER_2_29 = (96.0, 80.0, *_INTER_TAIL)
SM100_INTER_2_30 = (96.0, 86.0, 80.0, *_INTER_TAIL)


@dataclass(frozen=True)
class NcclConstants:
    """What one NCCL release's single-node allreduce model differs in (see the module table).

    Attributes:
        tag: the NVIDIA/nccl git tag read.
        nvls_latency_us: NVLS's fixed latency on one node (``tuning.cc``: ``baseLat`` NVLS
            23 in 2.18.5; ``hwLat[NVLINK][NVLS]`` 23 in 2.20.5, 25 from 2.24.3).
        tree_simple_base_us: ``baseLat[TREE][SIMPLE]`` (``tuning.cc``).
        tree_simple_hop_us: ``hwLat[NVLINK|PCI][TREE][SIMPLE]``, per hop class.
        ring_ll_fraction: ring LL bus bandwidth per link bandwidth (``ncclTopoTuneModel``: 1/4
            for an allreduce up to 2.20.5, 0.5 from 2.24.3).
        ll_max_hopper_gbps: ``llMaxBws`` Hopper single-node row (87.7 up to 2.20.5, 141 from
            2.24.3).
        blackwell_row: whether compute capability >= 100 has its own tables (``compCapIndex`` 3,
            from 2.26.2); before, such GPUs read the Hopper row.
        nvls_bandwidth: how NVLS bus bandwidth is computed: ``"generic"`` (``nChannels *
            bwIntra``, algorithm bandwidth 5/6 of it; 2.18.5), ``"min"`` (``nChannels *
            min(bwIntra, bwInter)``, 5/6; 2.20.5-2.27.5) or ``"efficiency"`` (2.28.9's
            ``nvlsEfficiency`` formula, the ring's ratio).
        ll128_all_arches: LL128 on by default for every compute capability >= 70 (from 2.27.5;
            before only 70, 80 and 90, and 100 in 2.26.2).
        max_channels: ``MAXCHANNELS`` (``device.h``: 32 up to 2.24.3, 64 from 2.26.2).
        nvls_min_gpus: fewest GPUs NVLS initializes on (``src/transport/nvls.cc``
            ``ncclNvlsInit``: ``gpuCount <= 2`` disables it up to 2.27.5, ``< 2`` from 2.28.9).
        blackwell_ring_ll128_gbps: ``perChMaxRingLL128Bws`` Blackwell row (N1, N2, N4).
        sm100_speeds_intra, sm100_speeds_inter: NCCL's Blackwell speed tables (``search.cc``).
        blackwell_nvls_tree_gbps: ``perChMaxNVLSTreeBws`` Blackwell row (N2, N4).
        nvls_tree_correction: NVLS-Tree takes the tree correction on Blackwell x86 (2.29.7 on).
        nvls_tree_net_hop_us: ``hwLat[NET][NVLS_TREE][SIMPLE]``, us per network hop of
            NVLS-Tree's latency across nodes (19 in 2.18.5, 14 in 2.20.5-2.27.5, 20.9 from
            2.28.9).
    """

    tag: str
    nvls_latency_us: float
    tree_simple_base_us: float
    tree_simple_hop_us: tuple[tuple[str, float], ...]
    ring_ll_fraction: float
    ll_max_hopper_gbps: float
    blackwell_row: bool
    nvls_bandwidth: str
    ll128_all_arches: bool
    max_channels: int
    nvls_min_gpus: int
    blackwell_ring_ll128_gbps: tuple[float, float, float] = (2 * 36.7, 34.6, 2 * 36.7)
    sm100_speeds_intra: tuple[float, ...] = SM100_INTRA_2_28
    sm100_speeds_inter: tuple[float, ...] = SM100_INTER_2_28
    blackwell_nvls_tree_gbps: tuple[float, float] = (96.0, 43.8)
    nvls_tree_correction: bool = False
    nvls_tree_net_hop_us: float = 20.9

    @property
    def release(self) -> str:
        """``"2.18.5"`` for tag ``v2.18.5-1``."""
        return str(self.parsed_release)

    @property
    def parsed_release(self) -> NcclRelease:
        """The tag as :func:`distlab.vocabulary.nccl_release` reads it (``2, 18, 5``)."""
        return nccl_release(self.tag)

    def tree_hop_us(self, hop_class: str) -> float:
        """``hwLat[hop_class][TREE][SIMPLE]``, us."""
        return dict(self.tree_simple_hop_us)[hop_class]


NCCL_CONSTANTS: dict[str, NcclConstants] = {
    "2.18": NcclConstants("v2.18.5-1", 23.0, 0.0, (("nvlink", 4.0), ("pci", 6.0)), 0.25, 87.7,
                        False, "generic", False, 32, 3, nvls_tree_net_hop_us=19.0),
    "2.20": NcclConstants("v2.20.5-1", 23.0, 0.0, (("nvlink", 28.0), ("pci", 28.0)), 0.25, 87.7,
                        False, "min", False, 32, 3, nvls_tree_net_hop_us=14.0),
    "2.24": NcclConstants("v2.24.3-1", 25.0, 8.4, (("nvlink", 4.0), ("pci", 4.0)), 0.5, 141.0,
                        False, "min", False, 32, 3, nvls_tree_net_hop_us=14.0),
    "2.26": NcclConstants("v2.26.2-1", 25.0, 8.4, (("nvlink", 4.0), ("pci", 4.0)), 0.5, 141.0,
                        True, "min", False, 64, 3, nvls_tree_net_hop_us=14.0),
    "2.27": NcclConstants("v2.27.5-1", 25.0, 8.4, (("nvlink", 4.0), ("pci", 4.0)), 0.5, 141.0,
                        True, "min", True, 64, 3, nvls_tree_net_hop_us=14.0),
    "2.28": NcclConstants("v2.28.9-1", 25.0, 8.4, (("nvlink", 4.0), ("pci", 4.0)), 0.5, 141.0,
                        True, "efficiency", True, 64, 2),
    "2.29": NcclConstants("v2.29.7-1", 25.0, 8.4, (("nvlink", 4.0), ("pci", 4.0)), 0.5, 141.0,
                        True, "efficiency", True, 64, 2, (40.0, 40.0, 40.0), SM100_INTRA_2_29,
                        SM100_INTER_2_29, (96.0, 43.8), True),
    "2.30": NcclConstants("v2.30.7-1", 25.0, 8.4, (("nvlink", 4.0), ("pci", 4.0)), 0.5, 141.0,
                        True, "efficiency", True, 64, 2, (40.0, 40.0, 40.0), SM100_INTRA_2_29,
                        SM100_INTER_2_30, (96.0, 80.0), True),
}
"""One entry per NCCL minor release modelled, keyed ``"2.18"`` ... ``"2.30"``."""

DEFAULT_NCCL_VERSION = "2.28"
"""NCCL 2.28.9: the NCCL of torch 2.11's CUDA wheels, which the project's H100 profile records
(torch 2.13's CPU wheel, the one on these machines, carries no NCCL)."""


class NcclReleaseWarning(UserWarning):
    """A release the model does not hold, priced with a neighbouring one (see the module doc)."""


@dataclass(frozen=True)
class ResolvedVersion:
    """What :func:`resolve_nccl_version` made of a release.

    Attributes:
        asked: the release as given (``"2.31.0+cuda13.0"``), or the default's release.
        version: the modelled release that prices it.
        note: one line saying it is priced with another release ("" when it is modelled).
    """

    asked: str
    version: NcclConstants
    note: str

    @property
    def priced_as(self) -> str:
        """The release that prices it, e.g. ``"2.30.7"``."""
        return self.version.release


def release_key(text: str) -> tuple[int, int]:
    """``(major, minor)`` of a release as NCCL prints it (:func:`distlab.vocabulary.nccl_release`:
    ``2.26``, ``2.26.2``, ``v2.26.2-1``, ``2.26.2+cuda12.8``, ``NCCL 2.26``). Raises
    ``ValueError`` naming the forms and the modelled releases otherwise, and for a major of
    :data:`CUDA_LIKE_MAJOR` or more (``"12.8"``, a CUDA version) rather than pricing it as the
    newest release."""
    try:
        key = nccl_release(text).key
    except ValueError:
        raise ValueError(f"nccl_version must be a release like '2.26', '2.26.2', 'v2.26.2-1' or "
                         f"'2.26.2+cuda12.8' (the modelled ones are {', '.join(NCCL_CONSTANTS)}), "
                         f"got {text!r}") from None
    if key[0] >= CUDA_LIKE_MAJOR:
        raise ValueError(f"nccl_version {str(text).strip()!r} is not an NCCL release (NCCL's are "
                         f"2.x, e.g. 2.26.2; a CUDA or driver version?); the modelled ones are "
                         f"{', '.join(NCCL_CONSTANTS)}")
    return key


CUDA_LIKE_MAJOR = 10
"""The smallest major :func:`release_key` refuses: CUDA's releases (10.x-13.x) and drivers'
(5xx) are what users give by mistake; NCCL is at 2.x, and a 3.x would price as the newest
release held, with the note."""


def resolve_nccl_version(version: str | NcclConstants | None = None) -> ResolvedVersion:
    """The modelled release that prices ``version`` (see the module doc), and what to say.

    ``None``: :data:`DEFAULT_NCCL_VERSION`; an :class:`NcclConstants`: itself. A modelled minor
    release (any patch of it) prices as itself; a release between two modelled ones as the older;
    one newer than all as the newest; one older than all as the oldest (2.18.5).
    """
    if isinstance(version, NcclConstants):
        return ResolvedVersion(version.release, version, "")
    if version is None:
        v = NCCL_CONSTANTS[DEFAULT_NCCL_VERSION]
        return ResolvedVersion(v.release, v, "")
    if not isinstance(version, str):
        raise TypeError(f"nccl_version must be a string like '2.24' or None, got "
                        f"{type(version).__name__} {version!r}")
    key = release_key(version)
    known = sorted((release_key(k), k) for k in NCCL_CONSTANTS)
    exact = [k for kk, k in known if kk == key]
    if exact:
        return ResolvedVersion(version, NCCL_CONSTANTS[exact[0]], "")
    below = [k for kk, k in known if kk < key]
    v = NCCL_CONSTANTS[below[-1] if below else known[0][1]]
    why = ("newer than every release the model holds" if key > known[-1][0] else
           "older than every release the model holds" if not below else
           "not a release the model holds")
    return ResolvedVersion(version, v, f"NCCL {version.strip()} is {why} "
                                       f"({known[0][1]}-{known[-1][1]}): priced as NCCL "
                                       f"{v.release}")


def nccl_constants(version: str | NcclConstants | None = None) -> NcclConstants:
    """The :class:`NcclConstants` that prices ``version`` (:func:`resolve_nccl_version`); a release
    the model does not hold issues its one-line note as a :class:`NcclReleaseWarning`."""
    resolved = resolve_nccl_version(version)
    if resolved.note:
        warnings.warn(resolved.note, NcclReleaseWarning, stacklevel=2)
    return resolved.version


def constants_or_none(version: str | NcclConstants | None) -> NcclConstants | None:
    """``None`` kept (the caller's default rows, 2.28.9's), an :class:`NcclConstants` itself, a
    release string through :func:`nccl_constants` (checked, its note a warning); a
    ``TypeError`` for anything else."""
    if version is None or isinstance(version, NcclConstants):
        return version
    if not isinstance(version, str):
        raise TypeError(f"version must be an NCCL release like '2.28' or an NcclConstants, got "
                        f"{type(version).__name__} {version!r}")
    return nccl_constants(version)
