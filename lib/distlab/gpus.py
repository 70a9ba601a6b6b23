"""The one GPU registry: every GPU model distlab names, with what each floor reads of it.

One entry per GPU (:class:`Gpu`): its name and short aliases, the memory a process can use
(bytes), its dense peak rate per dtype (FLOP/s, from the vendor's data sheet), its memory
bandwidth (bytes/s), its architecture, the collective library that runs its collectives
(``"nccl"`` or ``"rccl"``), the 8-GPU box that library's model prices it in, the network its
nodes are usually joined by, and where each figure comes from. The planner
(:mod:`distlab.plan.layout`), the NCCL and RCCL models, the kernels benchmark and the trace
judge read GPUs from here; a new GPU is one entry of :data:`GPUS`, and a user's own GPU, from
its figures, is :func:`user_gpu` (``python -m distlab.plan --gpu-spec``).

Core (floor 0): plain data and one resolver, no model. Box and network names are the keys the
library's own package holds (``distlab.nccl.boxes.GPU_BOXES``, ``distlab.nccl.multinode.
NETWORKS``; ``distlab.rccl.boxes.AMD_BOXES``, ``AMD_NICS``); the packages check them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["GPUS", "GPU_SPEC_KEYS", "LIBRARIES", "STAND_IN_BOX", "Gpu", "gpu", "gpu_aliases",
           "gpus_of_library", "user_gpu"]

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
        peak_flops: dense 16-bit (bf16/fp16) matrix peak, FLOP/s, from the data sheet (no
            sparsity; a GeForce card's with FP32 accumulate, what mixed-precision training
            runs, half its FP16-accumulate figure).
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
        box_stand_in: ``box`` is not this GPU's own box (none is held: an 8-GPU server of
            GeForce cards, GH200 nodes) but the nearest one held, a stand-in; the planner says
            its collectives are priced through it.
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
    box_stand_in: bool = False

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


_GEFORCE = ("; no box of 8 GeForce cards held (their drivers may route peer-to-peer traffic "
            "through host memory): collectives priced through the PCIe box of its generation "
            "with peer-to-peer, a stand-in; no published run calibrates its compute rate, so "
            "the planner's is assumed")

_NVIDIA = [
    Gpu("A100-40GB-SXM", 40 * GiB, 312e12, "a100_sxm8",
        "NVIDIA A100 data sheet (https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/"
        "a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf): 312 TFLOPS BF16 dense; "
        "40 GiB HBM2, 1555 GB/s", 1555e9,
        device_patterns=(r"\bA100\b.*\b40GB\b",),
        aliases=("a100-40gb",), architecture="ampere", default_network="ib_hdr200x8"),
    Gpu("A100-80GB-SXM", 80 * GiB, 312e12, "a100_sxm8",
        "NVIDIA A100 data sheet (https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/"
        "a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf): 312 TFLOPS BF16 dense; "
        "80 GiB HBM2e, 2039 GB/s", 2039e9,
        device_patterns=(r"\bA100\b.*\b80GB\b",),
        aliases=("a100", "a100-80gb"), architecture="ampere", default_network="ib_hdr200x8"),
    Gpu("H100-80GB-SXM", 85017493504, 989.4e12, "h100_sxm8",
        "NVIDIA H100 data sheet (https://resources.nvidia.com/en-us-tensor-core/"
        "nvidia-tensor-core-gpu-datasheet): 989 TFLOPS BF16 dense (1979 with sparsity), "
        "3.35 TB/s; "
        "memory as CUDA reports it on our H100 (torch's total_memory, 81079 MiB; nvidia-smi "
        "says 81559)", 3.35e12,
        device_patterns=(r"\bH100\b.*\b80GB HBM3\b",),
        aliases=("h100",), peak_flops_by_dtype={"fp8": 1978.9e12}, architecture="hopper",
        default_network="ib_ndr400x8"),
    Gpu("H200-141GB-SXM", 150109880320, 989.4e12, "h200_sxm8",
        "NVIDIA H200 data sheet (https://www.nvidia.com/en-us/data-center/h200/): 989 TFLOPS "
        "BF16 dense, 4.8 TB/s; memory as CUDA reports it "
        "on our H200 (cudaMemGetInfo's total, 143155 MiB; nvidia-smi says 143771)", 4.8e12,
        device_patterns=(r"\bH200\b",),
        aliases=("h200",), peak_flops_by_dtype={"fp8": 1978.9e12}, architecture="hopper",
        default_network="ib_ndr400x8"),
    Gpu("H100-96GB-HBM2e", 96 * GiB, 989.4e12, "h100_sxm8",
        "Meta's Grand Teton H100 with 96 GB HBM2e at 500 W (torchtitan's runs, https://github."
        "com/pytorch/torchtitan/blob/main/docs/performance.md; torchtitan "
        "divides by the SXM part's 989 TFLOPS too); memory nominal; bandwidth unpublished, "
        "taken as the 80 GB part's 3.35 TB/s", 3.35e12,
        architecture="hopper", default_network="ib_ndr400x8"),
    Gpu("B200", 183359 * 2**20, 2250e12, "b200_sxm8",
        "NVIDIA HGX B200 (https://www.nvidia.com/en-us/data-center/hgx/): 2.25 PFLOPS BF16 "
        "dense per GPU, 8 TB/s; 180 GB HBM3e "
        "usable (183359 MiB)", 8e12,
        device_patterns=(r"\bB200\b",),
        aliases=("b200",), peak_flops_by_dtype={"fp8": 4500e12}, architecture="blackwell",
        default_network="ib_ndr400x8"),
    Gpu("A800-80GB-SXM", 80 * GiB, 312e12, "a800_sxm8",
        "NVIDIA A800: the A100 80 GB SXM with NVLink cut to 400 GB/s, compute and memory "
        "unchanged (NVIDIA's statement, Reuters 2022-11-07: https://tweakers.net/nieuws/203182/; "
        "the A100 data sheet, https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/"
        "pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf: 312 TFLOPS BF16 dense, 80 GB "
        "HBM2e, 2039 GB/s); memory nominal; its compute rate is A100's (the same GA100)", 2039e9,
        device_patterns=(r"\bA800\b",),
        aliases=("a800", "a800-80gb"), architecture="ampere", default_network="ib_hdr200x8"),
    Gpu("H800-80GB-SXM", 85017493504, 989.4e12, "h800_sxm8",
        "NVIDIA H800: the H100 SXM with NVLink cut to 400 GB/s (8 links), its "
        "16-bit and FP8 tensor rates and memory unchanged (H100 data sheet, https://resources."
        "nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet: 989 TFLOPS BF16 dense, "
        "1979 FP8 dense, 80 GB HBM3, 3.35 TB/s); memory as CUDA reports it on our H100; nodes "
        "joined by 400 Gb/s InfiniBand per GPU as DeepSeek-V3's (https://arxiv.org/abs/"
        "2412.19437); its compute rate is H100's (the same GH100)", 3.35e12,
        device_patterns=(r"\bH800\b",),
        aliases=("h800",), peak_flops_by_dtype={"fp8": 1978.9e12}, architecture="hopper",
        default_network="ib_ndr400x8"),
    Gpu("H20-96GB", 96 * GiB, 148e12, "h100_sxm8",
        "NVIDIA H20 (Hopper, 78 SMs): 148 TFLOPS BF16 dense, 296 FP8 dense, 96 GB HBM3, 4.0 "
        "TB/s, NVLink 900 GB/s (18 links, the HGX H100 board's fabric, so its box is "
        "h100_sxm8's); NVIDIA publishes no data sheet for it: the figures as its partners "
        "list them (e.g. https://willitrunai.com/es/gpus/h20-96gb); memory nominal; no "
        "published run calibrates its compute rate (a seventh of H100's peak on more "
        "bandwidth), so the planner's is assumed", 4.0e12,
        device_patterns=(r"\bH20\b",),
        aliases=("h20",), peak_flops_by_dtype={"fp8": 296e12}, architecture="hopper",
        calibrated=False),
    Gpu("GH200-96GB", 96 * GiB, 989.4e12, "h100_sxm8",
        "NVIDIA GH200 Grace Hopper Superchip (https://www.nvidia.com/en-us/data-center/"
        "grace-hopper-superchip/): the H100's GPU, 1979 TFLOPS BF16 and 3958 FP8 with sparsity "
        "= 989 and 1979 dense, 96 GB HBM3, 4 TB/s; memory nominal; no box of GH200 nodes held "
        "(one GPU per Grace CPU, up to 4 joined by NVLink without NVSwitch): collectives priced "
        "through h100_sxm8, a stand-in", 4.0e12,
        device_patterns=(r"\bGH200\b",),
        aliases=("gh200",), peak_flops_by_dtype={"fp8": 1978.9e12}, architecture="hopper",
        box_stand_in=True),
    Gpu("B300", 288 * GiB, 2250e12, "b200_sxm8",
        "NVIDIA HGX B300 (https://www.nvidia.com/en-us/data-center/hgx/): 36 PFLOPS FP16/BF16 "
        "and 72 FP8 per 8 GPUs with sparsity = 2.25 and 4.5 PFLOPS dense per GPU; 288 GB "
        "HBM3e, 8 TB/s; NVLink 5 at 1.8 TB/s per GPU through NVLink switches, B200's box "
        "(DGX B300: Intel Xeon 6776P hosts); memory nominal (the runtime reports less, as "
        "B200's 192 GB reports 180)", 8e12,
        device_patterns=(r"\bB300\b",),
        aliases=("b300",), peak_flops_by_dtype={"fp8": 4500e12}, architecture="blackwell"),
    Gpu("V100-32GB-SXM2", 32 * GiB, 125e12, "a100_sxm8",
        "NVIDIA V100 data sheet (https://images.nvidia.com/content/technologies/volta/pdf/"
        "volta-v100-datasheet-update-us-1165301-r5.pdf): 125 TFLOPS FP16 tensor (SXM2; Volta "
        "has no BF16, so its 16-bit peak is FP16's), no FP8; 32 GB HBM2, 900 GB/s; NVLink 2, "
        "6 links, 300 GB/s both directions; memory nominal; no V100 box held (DGX-1's hybrid "
        "cube mesh is no NVSwitch): collectives priced through a100_sxm8 (twice its NVLink "
        "bandwidth), a stand-in; no published run calibrates its compute rate, so the "
        "planner's is assumed", 900e9,
        device_patterns=(r"\bV100\b.*\b32GB\b",),
        aliases=("v100", "v100-32gb"), architecture="volta", calibrated=False,
        box_stand_in=True),
    Gpu("L40S", 48 * GiB, 362.05e12, "l40s_pcie8",
        "NVIDIA L40S data sheet (https://www.nvidia.com/en-us/data-center/l40s/): 362.05 "
        "TFLOPS BF16 dense (733 with sparsity), 733 FP8 dense; 48 GB GDDR6, 864 GB/s; PCIe "
        "Gen4 x16, no NVLink; memory nominal (with ECC on the runtime reports less); no "
        "published run calibrates its compute rate, so the planner's is assumed", 864e9,
        device_patterns=(r"\bL40S\b",),
        aliases=("l40s",), peak_flops_by_dtype={"fp8": 733e12}, architecture="ada",
        calibrated=False),
    Gpu("L4", 24 * GiB, 121e12, "l40s_pcie8",
        "NVIDIA L4 data sheet (https://www.nvidia.com/en-us/data-center/l4/): 242 TFLOPS BF16 "
        "and 485 FP8 with sparsity = 121 and 242.5 dense; 24 GB GDDR6, 300 GB/s; PCIe Gen4 x16, "
        "no NVLink; memory nominal; no box of L4 servers held: collectives priced through "
        "l40s_pcie8 (the same PCIe Gen4 x16 link), a stand-in; no published run calibrates its "
        "compute rate, so the planner's is assumed", 300e9,
        device_patterns=(r"\bL4\b",),
        aliases=("l4",), peak_flops_by_dtype={"fp8": 242.5e12}, architecture="ada",
        calibrated=False, box_stand_in=True),
    Gpu("RTX-3090", 24 * GiB, 71e12, "pcie4_8",
        "NVIDIA Ampere GA102 architecture whitepaper, appendix A (https://www.nvidia.com/"
        "content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf): GeForce RTX "
        "3090, 71 TFLOPS FP16/BF16 tensor dense with FP32 accumulate, what mixed-precision "
        "training runs (142 with FP16 accumulate: GeForce halves the FP32-accumulate rate), no "
        "FP8; 24 GB GDDR6X, 936 GB/s; PCIe Gen4 x16; memory nominal" + _GEFORCE, 936e9,
        device_patterns=(r"\bRTX 3090\b(?! Ti)",),
        aliases=("rtx3090", "rtx-3090"), architecture="ampere", calibrated=False,
        box_stand_in=True),
    Gpu("RTX-4090", 24 * GiB, 165.2e12, "pcie4_8",
        "NVIDIA Ada GPU architecture whitepaper, appendix (https://images.nvidia.com/aem-dam/"
        "Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf): GeForce RTX 4090, 165.2 "
        "TFLOPS FP16/BF16 tensor dense and 330.3 FP8 dense, both with FP32 accumulate, what "
        "training runs (330.3 and 660.6 with FP16 accumulate); 24 GB GDDR6X, 1008 GB/s; PCIe "
        "Gen4 x16; memory nominal" + _GEFORCE, 1008e9,
        device_patterns=(r"\bRTX 4090\b(?! D)",),
        aliases=("rtx4090", "rtx-4090"), peak_flops_by_dtype={"fp8": 330.3e12},
        architecture="ada", calibrated=False, box_stand_in=True),
    Gpu("RTX-5090", 32 * GiB, 209.5e12, "pcie5_8",
        "NVIDIA RTX Blackwell GPU architecture whitepaper, appendix (https://images.nvidia.com/"
        "aem-dam/Solutions/geforce/blackwell/nvidia-rtx-blackwell-gpu-architecture.pdf): "
        "GeForce RTX 5090, 209.5 TFLOPS FP16/BF16 tensor dense and 419 FP8 dense, both with "
        "FP32 accumulate, what training runs (419 and 838 with FP16 accumulate); 32 GB GDDR7, "
        "1792 GB/s; PCIe Gen5 x16; memory nominal" + _GEFORCE, 1792e9,
        device_patterns=(r"\bRTX 5090\b",),
        aliases=("rtx5090", "rtx-5090"), peak_flops_by_dtype={"fp8": 419e12},
        architecture="blackwell", calibrated=False, box_stand_in=True),
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


STAND_IN_BOX = "pcie4_8"
"""The box a user's own GPU (:func:`user_gpu`) is priced in where its spec names none: eight
GPUs on PCIe Gen4 x16 switches with peer-to-peer, no NVLink (a key of
``distlab.nccl.boxes.GPU_BOXES``), said as a stand-in in the planner's output."""

GPU_SPEC_KEYS = {
    "name": "a name for it (default your-gpu)",
    "memory_gib": "memory a process can use, GiB",
    "bf16_tflops": "dense 16-bit tensor peak, TFLOP/s (no sparsity; FP32 accumulate)",
    "bandwidth_gbs": "memory bandwidth, GB/s",
    "fp8_tflops": "dense FP8 tensor peak, TFLOP/s (optional)",
    "architecture": "the architecture whose fitted efficiency its rate takes (optional: "
                    "ampere, ada, hopper, blackwell, volta)",
    "box": f"the NCCL box its collectives are priced in (optional; default {STAND_IN_BOX}, a "
           "stand-in)",
}
"""The keys of a user's own GPU (:func:`user_gpu`) and what each is."""

_SPEC_REQUIRED = ("memory_gib", "bf16_tflops", "bandwidth_gbs")


def _spec_number(key: str, value: object) -> float:
    """``value`` as a finite number > 0, else a ``ValueError`` naming ``key``."""
    x = float("nan")
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        try:
            x = float(value)
        except ValueError:
            pass
    if not 0 < x < float("inf"):
        raise ValueError(f"gpu-spec: {key}={value!r} must be a number > 0 "
                         f"({GPU_SPEC_KEYS[key]})")
    return x


def _spec_fields(spec: str | Mapping[str, object]) -> dict[str, object]:
    """The key/value pairs of ``spec``: a mapping, a JSON file's path (``*.json``) or
    ``KEY=VALUE,...`` text."""
    if isinstance(spec, Mapping):
        return dict(spec)
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"gpu-spec must be KEY=VALUE,... or a JSON file, got {spec!r}")
    if spec.strip().endswith(".json"):
        import json
        from pathlib import Path

        try:
            fields = json.loads(Path(spec.strip()).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"gpu-spec {spec}: not a readable JSON file ({exc})") from None
        if not isinstance(fields, dict):
            raise ValueError(f"gpu-spec {spec}: the JSON must be an object of "
                             f"{', '.join(GPU_SPEC_KEYS)}")
        return fields
    out: dict[str, object] = {}
    for item in spec.replace(",", " ").split():
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise ValueError(f"gpu-spec: {item!r} is not KEY=VALUE")
        if key in out:
            raise ValueError(f"gpu-spec: {key} given twice: give each key once")
        out[key] = value
    return out


def user_gpu(spec: str | Mapping[str, object]) -> Gpu:
    """A user's own NVIDIA GPU from its figures: ``"name=X,memory_gib=24,bf16_tflops=71,
    bandwidth_gbs=936"`` (commas or spaces), a JSON file (``*.json``) of an object with the
    same keys, or that mapping (:data:`GPU_SPEC_KEYS`). Its compute rate is never calibrated
    (``calibrated=False``: the planner says which architecture's efficiency it takes, or its
    default's); without ``box`` its collectives are priced in :data:`STAND_IN_BOX`, a stand-in.

    Raises:
        ValueError: naming the unknown key (with the keys allowed), the missing one, or the
            one whose value is not a number > 0 or not an architecture held.
    """
    fields = _spec_fields(spec)
    unknown = [k for k in fields if k not in GPU_SPEC_KEYS]
    if unknown:
        raise ValueError(f"gpu-spec: unknown key {unknown[0]!r}; the keys are "
                         f"{', '.join(GPU_SPEC_KEYS)}")
    missing = [k for k in _SPEC_REQUIRED if k not in fields]
    if missing:
        raise ValueError(f"gpu-spec: {missing[0]} missing ({GPU_SPEC_KEYS[missing[0]]}); "
                         f"required: {', '.join(_SPEC_REQUIRED)}")
    memory_gib, bf16, bandwidth = (_spec_number(k, fields[k]) for k in _SPEC_REQUIRED)
    peaks = {}
    if "fp8_tflops" in fields:
        peaks["fp8"] = _spec_number("fp8_tflops", fields["fp8_tflops"]) * 1e12
    architectures = sorted({g.architecture for g in gpus_of_library("nccl")})
    architecture = str(fields.get("architecture", "unknown"))
    if "architecture" in fields and architecture not in architectures:
        raise ValueError(f"gpu-spec: architecture={fields['architecture']!r} must be one of "
                         f"{', '.join(architectures)}")
    name = str(fields.get("name", "your-gpu")).strip() or "your-gpu"
    box = str(fields.get("box", STAND_IN_BOX))
    text = ", ".join(f"{k}={v}" for k, v in fields.items())
    return Gpu(name, max(1, int(memory_gib * GiB)), bf16 * 1e12, box,
               f"your own GPU, as given ({text}): not checked against a data sheet",
               bandwidth * 1e9, peak_flops_by_dtype=peaks, architecture=architecture,
               calibrated=False, box_stand_in="box" not in fields)
