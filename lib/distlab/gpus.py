"""The one GPU registry: every GPU model distlab names, with what each floor reads of it.

One entry per GPU (:class:`Gpu`): its name and short aliases, the memory a process can use
(bytes), its dense peak rate per dtype (FLOP/s, from the vendor's data sheet), its memory
bandwidth (bytes/s), its architecture, the collective library that runs its collectives
(``"nccl"`` or ``"rccl"``), the 8-GPU box that library's model prices it in, the network its
nodes are usually joined by, and where each figure comes from. The planner
(:mod:`distlab.plan.layout`), the NCCL and RCCL models, the kernels benchmark and the trace
judge read GPUs from here; a new GPU is one entry of :data:`GPUS`.

Core (floor 0): plain data and one resolver, no model. Box and network names are the keys the
library's own package holds (``distlab.nccl.boxes.GPU_BOXES``, ``distlab.nccl.multinode.
NETWORKS``; ``distlab.rccl.boxes.AMD_BOXES``, ``AMD_NICS``); the packages check them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["GPUS", "LIBRARIES", "Gpu", "gpu", "gpu_aliases", "gpus_of_library"]

GiB = 2**30

LIBRARIES = ("nccl", "rccl")
"""The collective libraries a GPU's collectives run on: NVIDIA's NCCL, AMD's RCCL."""


@dataclass(frozen=True)
class Gpu:
    """One GPU model.

    Attributes:
        name: e.g. ``"H100-80GB-SXM"``.
        memory_bytes: memory a process can use, bytes (what the runtime reports as the total
            where measured; else the data sheet's, said in ``source``).
        peak_flops: dense 16-bit (bf16/fp16) matrix peak, FLOP/s, from the data sheet.
        box: the 8-GPU box of the collective library's model that prices its collectives
            (a key of ``distlab.nccl.boxes.GPU_BOXES`` for NCCL, of
            ``distlab.rccl.boxes.AMD_BOXES`` for RCCL).
        source: where the figures come from (data sheets, with their address where public).
        memory_bytes_per_s: the memory's bandwidth, bytes per second, from the data sheet
            (0: unknown).
        aliases: short names that resolve to it (lower case: ``"h100"``).
        peak_flops_by_dtype: dense peak per dtype (``"bf16"``, ``"fp8"``), FLOP/s; the
            ``"bf16"`` entry is :attr:`peak_flops`.
        architecture: the architecture its rates are kept per (``"hopper"``; AMD's as RCCL
            keys its tables, ``"gfx942"``).
        library: ``"nccl"`` or ``"rccl"`` (:data:`LIBRARIES`).
        default_network: the network usually joining its nodes (a key of the library's
            networks), or ``None`` where none is held.
        product: the name the vendor and its runtime print (``"MI300X"``); ``""`` where the
            entry's own name is it.
        calibrated: whether a published run calibrates its compute rate (``False``: the
            planner's rate for it is assumed and says so).
        device_patterns: regular expressions that match the name the runtime gives the device
            (``torch.cuda.get_device_name``: ``"NVIDIA H100 80GB HBM3"``, ``"AMD Instinct
            MI300X"``), for this entry and no other.
    """

    name: str
    memory_bytes: int
    peak_flops: float
    box: str
    source: str
    memory_bytes_per_s: float = 0.0
    aliases: tuple[str, ...] = ()
    peak_flops_by_dtype: Mapping[str, float] = field(default_factory=dict)
    architecture: str = ""
    library: str = "nccl"
    default_network: str | None = None
    product: str = ""
    calibrated: bool = True
    device_patterns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.memory_bytes, int) or isinstance(self.memory_bytes, bool) \
                or self.memory_bytes < 1:
            raise ValueError(f"memory_bytes must be an int >= 1, got {self.memory_bytes!r}")
        if self.library not in LIBRARIES:
            raise ValueError(f"library must be one of {', '.join(LIBRARIES)}, got "
                             f"{self.library!r}")
        peaks = dict(self.peak_flops_by_dtype)
        peaks.setdefault("bf16", self.peak_flops)
        object.__setattr__(self, "peak_flops_by_dtype", MappingProxyType(peaks))

    def peak(self, dtype: str = "bf16") -> float:
        """Dense peak FLOP/s in ``dtype``; ``ValueError`` naming the held dtypes if absent."""
        if dtype not in self.peak_flops_by_dtype:
            raise ValueError(f"dtype must be one of {', '.join(self.peak_flops_by_dtype)} for "
                             f"{self.name}, got {dtype!r}")
        return self.peak_flops_by_dtype[dtype]


_NVIDIA = [
    Gpu("A100-40GB-SXM", 40 * GiB, 312e12, "a100_sxm8",
        "NVIDIA A100 data sheet: 312 TFLOPS BF16 dense; 40 GiB HBM2, 1555 GB/s", 1555e9,
        device_patterns=(r"\bA100\b.*\b40GB\b",),
        aliases=("a100-40gb",), architecture="ampere", default_network="ib_hdr200x8"),
    Gpu("A100-80GB-SXM", 80 * GiB, 312e12, "a100_sxm8",
        "NVIDIA A100 data sheet: 312 TFLOPS BF16 dense; 80 GiB HBM2e, 2039 GB/s", 2039e9,
        device_patterns=(r"\bA100\b.*\b80GB\b",),
        aliases=("a100", "a100-80gb"), architecture="ampere", default_network="ib_hdr200x8"),
    Gpu("H100-80GB-SXM", 85017493504, 989.4e12, "h100_sxm8",
        "NVIDIA H100 data sheet: 989 TFLOPS BF16 dense (1979 with sparsity), 3.35 TB/s; "
        "memory as CUDA reports it on our H100 (torch's total_memory, 81079 MiB; nvidia-smi "
        "says 81559)", 3.35e12,
        device_patterns=(r"\bH100\b.*\b80GB HBM3\b",),
        aliases=("h100",), peak_flops_by_dtype={"fp8": 1978.9e12}, architecture="hopper",
        default_network="ib_ndr400x8"),
    Gpu("H200-141GB-SXM", 150109880320, 989.4e12, "h200_sxm8",
        "NVIDIA H200 data sheet: 989 TFLOPS BF16 dense, 4.8 TB/s; memory as CUDA reports it "
        "on our H200 (cudaMemGetInfo's total, 143155 MiB; nvidia-smi says 143771)", 4.8e12,
        device_patterns=(r"\bH200\b",),
        aliases=("h200",), peak_flops_by_dtype={"fp8": 1978.9e12}, architecture="hopper",
        default_network="ib_ndr400x8"),
    Gpu("H100-96GB-HBM2e", 96 * GiB, 989.4e12, "h100_sxm8",
        "Meta's Grand Teton H100 with 96 GB HBM2e at 500 W (torchtitan's runs; torchtitan "
        "divides by the SXM part's 989 TFLOPS too); memory nominal; bandwidth unpublished, "
        "taken as the 80 GB part's 3.35 TB/s", 3.35e12,
        architecture="hopper", default_network="ib_ndr400x8"),
    Gpu("B200", 183359 * 2**20, 2250e12, "b200_sxm8",
        "NVIDIA HGX B200 data sheet: 2.25 PFLOPS BF16 dense per GPU, 8 TB/s; 180 GB HBM3e "
        "usable (183359 MiB)", 8e12,
        device_patterns=(r"\bB200\b",),
        aliases=("b200",), peak_flops_by_dtype={"fp8": 4500e12}, architecture="blackwell",
        default_network="ib_ndr400x8"),
]

_AMD_ASSUMED = ("; memory nominal (the data sheet's HBM capacity, not measured here); no "
                "published run calibrates its compute rate, so the planner's is assumed")
_AMD = [
    Gpu("MI300X", 192 * GiB, 1307.4e12, "mi300x_8",
        "AMD Instinct MI300X data sheet (https://www.amd.com/en/products/accelerators/instinct/"
        "mi300/mi300x.html): 1307.4 TFLOPS BF16 dense, 2614.9 FP8 dense; 192 GB HBM3, "
        "5.3 TB/s" + _AMD_ASSUMED, 5.3e12,
        device_patterns=(r"\bMI300X\b",),
        aliases=("mi300x",), peak_flops_by_dtype={"fp8": 2614.9e12}, architecture="gfx942",
        library="rccl", default_network="cx7", product="MI300X", calibrated=False),
    Gpu("MI325X", 256 * GiB, 1307.4e12, "mi325x_8",
        "AMD Instinct MI325X data sheet (https://www.amd.com/en/products/accelerators/instinct/"
        "mi300/mi325x.html): 1307.4 TFLOPS BF16 dense, 2614.9 FP8 dense; 256 GB HBM3E, "
        "6 TB/s" + _AMD_ASSUMED, 6.0e12,
        device_patterns=(r"\bMI325X\b",),
        aliases=("mi325x",), peak_flops_by_dtype={"fp8": 2614.9e12}, architecture="gfx942",
        library="rccl", default_network="thor2", product="MI325X", calibrated=False),
    Gpu("MI350X", 288 * GiB, 2300e12, "",
        "AMD Instinct MI350X data sheet (https://www.amd.com/en/products/accelerators/instinct/"
        "mi350/mi350x.html): 2.3 PFLOPS BF16 dense, 4.6 FP8 dense; 288 GB HBM3E, 8 TB/s; no "
        "RCCL box held" + _AMD_ASSUMED, 8e12,
        device_patterns=(r"\bMI350X\b",),
        aliases=("mi350x",), peak_flops_by_dtype={"fp8": 4600e12}, architecture="gfx950",
        library="rccl", product="MI350X", calibrated=False),
    Gpu("MI355X", 288 * GiB, 2500e12, "mi355x_8",
        "AMD Instinct MI355X data sheet (https://www.amd.com/en/products/accelerators/instinct/"
        "mi350/mi355x.html): 2.5 PFLOPS BF16 dense, 5.0 FP8 dense; 288 GB HBM3E, "
        "8 TB/s" + _AMD_ASSUMED, 8e12,
        device_patterns=(r"\bMI355X\b",),
        aliases=("mi355x",), peak_flops_by_dtype={"fp8": 5000e12}, architecture="gfx950",
        library="rccl", default_network="pollara", product="MI355X", calibrated=False),
]

GPUS: Mapping[str, Gpu] = MappingProxyType({g.name: g for g in (*_NVIDIA, *_AMD)})
"""Every GPU distlab names, by name, NVIDIA's in the planner's order then AMD's."""


def gpu_aliases() -> dict[str, str]:
    """Every short name and the GPU it names (``{"h100": "H100-80GB-SXM", ...}``)."""
    return {a: g.name for g in GPUS.values() for a in g.aliases}


def gpus_of_library(library: str) -> tuple[Gpu, ...]:
    """The GPUs whose collectives ``library`` runs, in :data:`GPUS`' order."""
    if library not in LIBRARIES:
        raise ValueError(f"library must be one of {', '.join(LIBRARIES)}, got {library!r}")
    return tuple(g for g in GPUS.values() if g.library == library)


def gpu(name: Gpu | str) -> Gpu:
    """``name`` itself, a key of :data:`GPUS` or an alias (any case: ``"h100"``, ``"MI300x"``).

    Raises:
        ValueError: a name that is neither, naming every name and alias held.
    """
    if isinstance(name, Gpu):
        return name
    if isinstance(name, str):
        key = gpu_aliases().get(name.lower(), name)
        if key in GPUS:
            return GPUS[key]
    raise ValueError(f"gpu must be one of {', '.join(GPUS)} (or {', '.join(gpu_aliases())}); "
                     f"got {name!r}")
