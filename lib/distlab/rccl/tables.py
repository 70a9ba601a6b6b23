"""RCCL's tuning tables for gfx942 (MI300X, MI325X) and gfx950 (MI350X, MI355X), per release, as
its source states them.

RCCL keeps NCCL's ``ncclTopoTuneModel`` skeleton but, on AMD, replaces NVIDIA's per-architecture
caps with one table per topology (``struct tuningModel`` in ``src/graph/tuning.cc``): hardware
latencies per link class, a bandwidth ratio per algorithm and protocol (one row up to two nodes,
one beyond), and a correction factor per message size for trees (always) and rings (across
nodes). An 8 x MI300X node matches RCCL's hard-coded topology ``rome_model_79`` (one node, 28
rings, MSCCL on) or, with one NIC per GPU, ``rome_model_81`` (16 rings); both select table 5.
An 8 x MI355X node matches the same two models (``parseA2a8P``), which then force table 6 on
gfx950.

Releases held (every value read with ``git show`` of ROCm/rccl and its develop history;
docs/research/2026-11-27-rccl.md cites each line):

======== ================ ======= ============================================================
arch     release          ROCm    where read
======== ================ ======= ============================================================
gfx942   2.20.5           6.2.x   tag ``rocm-6.2.0`` (``src/graph/tuning.cc`` ``tuning_model_5``)
gfx942   2.21.5           6.3.x   branch ``release-staging/rocm-rel-6.3`` (the 6.3 release
                                  branch)
gfx942   2.26.6           7.0.x   develop ``277747c1`` (2025-08-26, the last commit of 2.26.6;
                                  ROCm 7.0 ships 2.26.6, its release tag is in no mirror read;
                                  ``6ade5065`` of 2025-08-18 has the same table)
gfx950   2.26.6           7.0.x   develop ``6ade5065`` (2025-08-18, "2.26.6-HEAD:6ade506", the
                                  build of the published AAC14 MI355X run): ``tuning_model_6``
======== ================ ======= ============================================================

ROCm 6.4.0/6.4.1's 2.22.3 carries 2.21.5's gfx942 table (develop changed it next on 2025-03-16)
and is priced with it, saying so; 2.27.7 (ROCm 7.1, 7.2) changed nothing an allreduce on gfx942
reads and is priced with 2.26.6, saying so. Release branches take cherry-picks develop does not
show in order (ROCm 6.4.2's changelog lists the gfx942 LL128 work of 2.26.6), so a 6.4.2 run
may choose as 2.26.6 does: the note says that too. gfx950 has a table of its own from 2.26.6
(``75d22b47``, 2025-06-29; ROCm 7.0 is the first to support the GPU): any other release prices
on gfx950 as 2.26.6, with a note (develop ``72996e4d``, 2025-10-30, raised gfx950's allreduce LL
cutoff to 256 KiB for 2.27.x).

Units: microseconds for latencies, GB/s (1e9 bytes/s) for bandwidths, as RCCL's tables are.
Protocol order everywhere: LL, LL128, Simple.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from distlab.gpus import gpus_of_library

__all__ = ["DEFAULT_ARCH", "GPU_ARCHS", "RCCL_ARCHS", "RCCL_ARCH_TABLES", "RCCL_TABLES",
           "RcclTables", "ResolvedRelease", "arch_gpus", "check_arch", "check_release",
           "release_key", "resolve_release", "rocm_rccl"]

Row = tuple[float, float, float]
"""One value per protocol: LL, LL128, Simple."""


@dataclass(frozen=True)
class RcclTables:
    """What an allreduce on one GPU architecture reads from one RCCL release.

    Attributes:
        release: RCCL's version (``makefiles/version.mk``), e.g. ``"2.21.5"``.
        rocm: the ROCm release that ships it.
        source: where each value was read.
        base_lat_us: ``baseLat`` per protocol, the same for Tree and Ring.
        xgmi_lat_us, net_lat_us: ``hwLat[NVLINK]`` (xGMI) and ``hwLat[NET]`` per algorithm
            (``"tree"``, ``"ring"``) and protocol.
        bw_ratio: ``bwRatio`` per row (``0``: up to two nodes, ``1``: more), algorithm and
            protocol: the multiplier on the bus bandwidth.
        tree_correction, ring_correction: per protocol, 27 factors indexed by
            ``log2(nbytes >> 6)`` (index 26 for every larger size).
        ll128_multinode: whether LL128 may run across nodes (RCCL's LL128 arch list holds the
            architecture and the rail-optimized topology sets ``ll128Enabled``); one node never
            runs LL128.
        ll_max_bytes, ll128_max_bytes: the multi-node allreduce protocol override
            (``llProtoRanges``, applied after the cost model keeps its algorithm): LL up to
            ``ll_max_bytes``, LL128 above it up to ``ll128_max_bytes`` (times 3.8 beyond two
            nodes), Simple above; ``None``: no override in this release.
        msccl_max_bytes: one node: the largest allreduce MSCCL's installed ``allpairs``
            algorithms take (out of place), ahead of the cost model.
        msccl_skips_bf16_over: a bf16 allreduce above this many bytes skips MSCCL; ``None``:
            no such rule.
        aliases: releases that read these same tables on ``arch`` (priced as this one, with a
            note).
        arch: the GPU architecture (``"gfx942"``: table 5; ``"gfx950"``: table 6).
    """

    release: str
    rocm: str
    source: str
    base_lat_us: Row
    xgmi_lat_us: dict[str, Row]
    net_lat_us: dict[str, Row]
    bw_ratio: tuple[dict[str, Row], dict[str, Row]]
    tree_correction: tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]
    ring_correction: tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]
    ll128_multinode: bool
    ll_max_bytes: int | None
    ll128_max_bytes: int | None
    msccl_max_bytes: int
    msccl_skips_bf16_over: int | None = None
    aliases: tuple[str, ...] = field(default=())
    arch: str = "gfx942"


def _cf(*values: float) -> tuple[float, ...]:
    if len(values) != 27:
        raise ValueError(f"a correction row has 27 entries, got {len(values)}")
    return tuple(values)


_TENTH = (0.1,)
_ZERO27 = _cf(*(0.0,) * 27)

_R2_20 = RcclTables(
    release="2.20.5", rocm="6.2",
    source="ROCm/rccl tag rocm-6.2.0, src/graph/tuning.cc tuning_model_5 and ncclTopoTuneModel",
    base_lat_us=(12.0, 12.0, 17.0),
    xgmi_lat_us={"tree": (0.8, 0.0, 2.5), "ring": (0.8, 0.0, 3.6)},
    net_lat_us={"tree": (12.5, 0.0, 22.4), "ring": (9.5, 0.0, 19.8)},
    bw_ratio=({"tree": (0.41, 0.0, 1.00), "ring": (0.41, 0.0, 1.00)},
              {"tree": (0.41, 0.0, 0.86), "ring": (0.41, 0.0, 1.00)}),
    tree_correction=(
        _cf(.1, .1, .1, .1, .1, 1, 1, .8, .1, .4, .5, 1, .6, .4, .6, .1, .3, .4, .4, .3, .2,
            .2, .2, .2, .2, .2, .2),
        _ZERO27,
        _cf(.1, .1, .1, .1, .1, .1, .1, .1, 1, 1, 1, .4, 1, 1, 1, .2, .7, 1, 1, 1, .8, .7, .7,
            .8, .8, .8, .9)),
    ring_correction=(
        _cf(.1, .1, .1, .1, .1, .1, .1, 1, .1, .2, .2, .1, .5, .8, 1, .2, .4, .5, .4, .4, .3,
            .2, .2, .2, .2, .2, .2),
        _ZERO27,
        _cf(.1, .1, .1, .1, .1, .1, .1, .1, .1, .7, .1, .1, .1, .1, .1, 1, 1, 1, .9, 1, 1, 1,
            1, 1, 1, 1, 1)),
    ll128_multinode=False, ll_max_bytes=None, ll128_max_bytes=None,
    msccl_max_bytes=16777216)

_R2_21 = RcclTables(
    release="2.21.5", rocm="6.3",
    source="ROCm/rccl branch release-staging/rocm-rel-6.3, src/graph/tuning.cc tuning_model_5",
    base_lat_us=(12.0, 12.0, 17.0),
    xgmi_lat_us={"tree": (0.9, 0.0, 2.3), "ring": (0.8, 0.0, 2.1)},
    net_lat_us={"tree": (10.5, 0.0, 25.0), "ring": (9.5, 0.0, 320.0)},
    bw_ratio=({"tree": (0.06, 0.0, 0.11), "ring": (0.08, 0.0, 1.00)},
              {"tree": (0.06, 0.0, 0.59), "ring": (0.08, 0.0, 1.00)}),
    tree_correction=(
        _cf(*_TENTH * 6, 1, 1, 1, 1, 1, .6, 1, .9, 1, 1, *_TENTH * 11),
        _ZERO27,
        _cf(*_TENTH * 15, .7, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, .8)),
    ring_correction=(
        _cf(*_TENTH * 11, 1, .2, 1, .4, .4, .1, .2, .2, *_TENTH * 8),
        _ZERO27,
        _cf(*_TENTH * 23, .8, 1, 1, 1)),
    ll128_multinode=False, ll_max_bytes=None, ll128_max_bytes=None,
    msccl_max_bytes=16777216, aliases=("2.22.3",))

_R2_26 = RcclTables(
    release="2.26.6", rocm="7.0",
    source="ROCm/rccl develop 277747c1 (2025-08-26), src/graph/tuning.cc tuning_model_5 with "
           "llProtoRanges; src/rccl_wrap.cc rcclUpdateCollectiveProtocol; "
           "src/collectives.cc (MSCCL bf16 rule); tools/msccl-algorithms",
    base_lat_us=(12.0, 12.0, 17.0),
    xgmi_lat_us={"tree": (0.9, 0.9, 2.3), "ring": (0.8, 0.8, 2.1)},
    net_lat_us={"tree": (10.5, 10.5, 25.0), "ring": (9.5, 9.5, 320.0)},
    bw_ratio=({"tree": (0.06, 0.06, 0.11), "ring": (0.08, 0.08, 1.00)},
              {"tree": (0.06, 0.06, 0.59), "ring": (0.08, 0.08, 1.00)}),
    tree_correction=(
        _cf(*_TENTH * 6, 1, 1, 1, 1, 1, .6, 1, .9, 1, 1, *_TENTH * 11),
        _cf(*_TENTH * 6, 1, 1, 1, 1, 1, .6, 1, .9, 1, 1, *_TENTH * 11),
        _cf(*_TENTH * 15, .7, 1, 1, 1, 1, 1, .7, .7, .5, .6, .6, .6)),
    ring_correction=(
        _cf(*_TENTH * 11, 1, .2, 1, .4, .4, .1, .2, .2, *_TENTH * 8),
        _cf(*_TENTH * 11, 1, .2, 1, .4, .4, .1, .2, .2, *_TENTH * 8),
        _cf(*_TENTH * 22, 1, .8, 1, 1, 1)),
    ll128_multinode=True, ll_max_bytes=1048576, ll128_max_bytes=9437184,
    msccl_max_bytes=20971520, msccl_skips_bf16_over=8388608, aliases=("2.27.7",))

_R2_26_GFX950 = replace(
    _R2_26, arch="gfx950", aliases=(),
    source="ROCm/rccl develop 6ade5065 (2025-08-18, the AAC14 MI355X build), "
           "src/graph/tuning.cc tuning_model_6 (L341-L382) with llProtoRanges; "
           "src/graph/rome_models.cc parseA2a8P (tuning forced to 6 on gfx950); "
           "src/rccl_wrap.cc rcclUpdateCollectiveProtocol; src/collectives.cc (MSCCL bf16 "
           "rule); tools/msccl-algorithms",
    # table 6 keeps table 5's latencies and bandwidth ratios (and 2.26.6's MSCCL rules); its
    # correction factors and protocol ranges are its own
    tree_correction=(
        _cf(*_TENTH * 6, 1, 1, 1, 1, 1, .6, 1, .9, 1, 1, *_TENTH * 11),
        _cf(*_TENTH * 6, 1, 1, 1, 1, 1, .6, 1, .9, 1, 1, 1, 1, 1, 2, *_TENTH * 7),
        _cf(*_TENTH * 15, .7, 1, .1, .1, .1, .9, .9, .7, .8, .6, .6, .6)),
    ring_correction=(
        _cf(*_TENTH * 11, 1, .2, 1, .4, .4, .1, .2, .2, *_TENTH * 8),
        _cf(*_TENTH * 11, 1, .2, 1, .4, .4, .1, .2, *_TENTH * 9),
        _cf(*_TENTH * 22, 1, .8, .8, 1, 1)),
    ll_max_bytes=131071, ll128_max_bytes=17660227)

RCCL_TABLES: dict[str, RcclTables] = {t.release: t for t in (_R2_20, _R2_21, _R2_26)}
"""The gfx942 releases read, by RCCL version."""

RCCL_ARCH_TABLES: dict[str, dict[str, RcclTables]] = {
    "gfx942": RCCL_TABLES, "gfx950": {_R2_26_GFX950.release: _R2_26_GFX950}}
"""The releases read per GPU architecture, by RCCL version."""

RCCL_ARCHS: tuple[str, ...] = tuple(RCCL_ARCH_TABLES)
"""The architectures whose tables are held: gfx942 (MI300X, MI325X), gfx950 (MI350X, MI355X)."""

DEFAULT_ARCH = "gfx942"
"""What every function prices unless told otherwise."""

GPU_ARCHS: dict[str, str] = {g.product: g.architecture for g in gpus_of_library("rccl")}
"""Each AMD GPU the model knows, by its product name, and the architecture RCCL keys its tables
on (read from the one GPU registry, :data:`distlab.gpus.GPUS`): the one map the command's
``--gpu``, the boxes and the trace judge read."""


def arch_gpus(arch: str) -> tuple[str, ...]:
    """The GPUs of :data:`GPU_ARCHS` on ``arch``, in its order (``("MI300X", "MI325X")``)."""
    return tuple(g for g, a in GPU_ARCHS.items() if a == arch)

DEFAULT_RELEASE = "2.26.6"
"""ROCm 7.0's RCCL, what a ROCm build of torch 2.9-2.11 is paired with."""

_ROCM = {"6.2": "2.20.5", "6.3": "2.21.5", "6.4": "2.22.3", "7.0": "2.26.6", "7.1": "2.27.7",
         "7.2": "2.27.7"}
"""ROCm releases to the RCCL they ship (RCCL's CHANGELOG)."""

_GFX950_AFTER = ("develop 72996e4d of 2025-10-30 raised gfx950's allreduce LL cutoff from 128 "
                 "to 256 KiB for 2.27.x")
"""What a gfx950 release newer than 2.26.6 reads differently
(docs/research/2026-11-27-rccl.md 2.5)."""


def check_arch(arch: object) -> str:
    """``arch`` if it is an architecture whose tables are held, else a ``ValueError`` (a
    ``TypeError`` for a non-string) naming them."""
    if not isinstance(arch, str):
        raise TypeError(f"arch must be a string like 'gfx942', got {type(arch).__name__}")
    if arch not in RCCL_ARCH_TABLES:
        raise ValueError(f"an RCCL architecture is one of {', '.join(RCCL_ARCHS)}, got {arch!r}")
    return arch


def release_key(text: str) -> tuple[int, ...]:
    """``"2.21.5"`` -> ``(2, 21, 5)``; a ``ValueError`` naming the form otherwise, and for a
    release whose major is not RCCL's 2 (``"6.4.1"``, a ROCm release without its prefix) the
    ``rocm-`` form to write instead."""
    parts = text.strip().split(".")
    if len(parts) not in (2, 3) or not all(p.isdigit() for p in parts):
        raise ValueError(f"release must be an RCCL release like 2.21.5 or a ROCm one like "
                         f"rocm-6.3, got {text!r}")
    key = tuple(int(p) for p in parts)
    if key[0] != 2:
        raise ValueError(f"release {text.strip()!r} is not an RCCL release (RCCL's are 2.x, "
                         f"e.g. 2.21.5); for ROCm {text.strip()} write 'rocm-{text.strip()}'")
    return key


def rocm_rccl(rocm: str) -> str:
    """The RCCL release ROCm ``rocm`` ships (``"6.4"`` or ``"6.4.1"`` -> ``"2.22.3"``); a
    ``ValueError`` naming the ROCm releases known otherwise."""
    minor = ".".join(rocm.strip().split(".")[:2])
    if minor not in _ROCM:
        raise ValueError(f"release rocm-{rocm.strip()}: ROCm {rocm.strip() or '?'} is not one "
                         f"whose RCCL is known; one of {', '.join(_ROCM)}")
    return _ROCM[minor]


def check_release(release: str) -> str:
    """``release`` (an RCCL release like ``"2.21.5"``, ``"2.21"``, or a ROCm one like
    ``"rocm-6.3"``) if it is written as one, else a ``ValueError`` saying what to write
    (``TypeError`` for a non-string): the check :func:`resolve_release` and the command's
    ``--release`` share."""
    if not isinstance(release, str):
        raise TypeError(f"release must be a string like '2.21.5' or 'rocm-6.3', got "
                        f"{type(release).__name__} {release!r}")
    text = release.strip().lower()
    if text.startswith("rocm"):
        rocm_rccl(text.removeprefix("rocm").lstrip("-_ "))
    else:
        release_key(text)
    return release


@dataclass(frozen=True)
class ResolvedRelease:
    """The release asked for, the tables that price it and the one line saying how ("" when
    they are its own)."""

    asked: str
    tables: RcclTables
    note: str


def resolve_release(release: str | None = None, arch: str = DEFAULT_ARCH) -> ResolvedRelease:
    """The tables for an RCCL release (``"2.21.5"``, ``"2.21"``) or a ROCm one (``"rocm-6.3"``)
    on ``arch`` (``"gfx942"``, ``"gfx950"``).

    A held release prices as itself; an alias (2.22.3, 2.27.7 on gfx942) as the release whose
    tables it carries; any other as the newest held release not newer than it (the oldest for
    one older than all); each time but the first with a note.

    Raises:
        ValueError: not a release (a ROCm release without its ``rocm-`` prefix, ``"6.4.1"``,
            is refused with the form to write), a ROCm release RCCL's changelog does not name,
            or an architecture whose tables are not held.
        TypeError: a release that is not a string.
    """
    held_tables = RCCL_ARCH_TABLES[check_arch(arch)]
    if release is None:
        return ResolvedRelease(DEFAULT_RELEASE, held_tables[DEFAULT_RELEASE], "")
    text = check_release(release).strip().lower()
    if text.startswith("rocm"):
        text = rocm_rccl(text.removeprefix("rocm").lstrip("-_ "))
    key = release_key(text)
    for t in held_tables.values():
        if release_key(t.release)[:len(key)] == key:
            return ResolvedRelease(release, t, "")
        for alias in t.aliases:
            if release_key(alias)[:len(key)] == key:
                why = (f"RCCL {alias} reads the same allreduce tables on {arch} as "
                       f"{t.release}: priced as {t.release}")
                if alias == "2.22.3":
                    why += (" (ROCm 6.4.2's branch took later LL128 work: it may choose as "
                            "2.26.6)")
                return ResolvedRelease(release, t, why)
    held = sorted(held_tables, key=release_key)
    below = [r for r in held if release_key(r) < key]
    t = held_tables[below[-1] if below else held[0]]
    why = ("newer than" if below and below[-1] == held[-1] else
           "older than" if not below else "between")
    read = f"the releases read ({', '.join(held)})"
    if arch != DEFAULT_ARCH:
        read = f"the {arch} releases read ({', '.join(held)})"
    note = f"RCCL {text} is {why} {read}: priced as {t.release}"
    if arch == "gfx950" and below:
        note += f" ({_GFX950_AFTER})"
    elif arch == "gfx950":
        note += " (gfx950's own table starts at 2.26.6, ROCm 7.0)"
    return ResolvedRelease(release, t, note)
