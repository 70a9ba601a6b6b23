"""Published training runs, each with its exact source, for calibrating and judging the planner.

The runs ship as package data (``distlab/evidence/plan/data/published_runs.json``);
:func:`load_published` reads and validates them into frozen records. Every number is what the source
states; what was inferred is explained in the run's :attr:`PublishedRun.derived`, and anything not
stated is
``None``. Whole sources are split into ``"calibration"`` (fit on these) and ``"held_out"`` (only
judge on these).

Units: TFLOP/s per GPU (1e12 FLOP/s), MFU/HFU as fractions, tokens/s per GPU, seconds per step,
memory in GiB (2**30 bytes) as the source reports it (:attr:`PublishedMeasured.memory_kind` says
what was measured), batches in sequences.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

from distlab.gpus import gpus_of_library
from distlab.plan.layout import PRECISIONS as STATES
from distlab.plan.memory import FRAMEWORKS
from distlab.recompute import PUBLISHED_RECOMPUTE

GiB = 2**30
"""Bytes in a GiB."""

GPUS = tuple(g.name for g in gpus_of_library("nccl"))
"""GPU names a run may give (the NVIDIA GPUs of the registry, :data:`distlab.gpus.GPUS`);
``"H100-96GB-HBM2e"`` is the lower-TDP H100 of Meta's Grand Teton hosts that torchtitan's
published numbers were measured on."""
PRECISIONS = ("bf16", "fp16", "fp8", "mixed16")
"""Training precision; ``"mixed16"``: 16-bit mixed precision whose format the source omits."""
RECOMPUTE = PUBLISHED_RECOMPUTE
"""How a run states its recompute (:data:`distlab.recompute.PUBLISHED_RECOMPUTE`; torchtitan's
per-op policy is ``"selective"`` with the note :data:`distlab.evidence.plan.runs.PER_OP_NOTE`)."""
SCHEDULES = ("1F1B", "Interleaved1F1B")
SPLITS = ("calibration", "held_out")
FLOPS_BASES = ("model", "hardware")
"""``"model"``: the FLOP count leaves recomputation out (MFU-style); ``"hardware"``: counts it."""
_DATA = "data/published_runs.json"


@dataclass(frozen=True)
class PublishedSource:
    """One published source: where its runs come from and how they were made.

    Attributes:
        key: short name that run ids start with.
        title, authors_or_org, year, url: the citation.
        table: where in the source the runs are (table, section, commit).
        how: how the runs were made, as the source states it.
        split: ``"calibration"`` or ``"held_out"``.
        zero_stage: the ZeRO stage of its runs that state none, where the configuration they
            ran with states it (``how`` says where); ``None``: unknown.
        states: the bytes of its runs' model states, a key of
            :data:`distlab.plan.layout.PRECISIONS`, where the configuration states them;
            ``None``: unknown.
        framework: what its runs' kernels keep for backward, a key of
            :data:`distlab.plan.memory.FRAMEWORKS` (``"default"`` unless the code they ran
            with says otherwise; ``how`` says where): their memory is priced with its options.
    """

    key: str
    title: str
    authors_or_org: str
    year: int
    url: str
    table: str
    how: str
    split: str
    zero_stage: int | None = None
    states: str | None = None
    framework: str = "default"


@dataclass(frozen=True)
class PublishedModel:
    """The decoder transformer a run trained (sizes in elements; ``seq_len`` in tokens)."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn_hidden: int
    vocab: int
    seq_len: int
    tied_embeddings: bool
    gated_ffn: bool
    params_stated: float | None


@dataclass(frozen=True)
class PublishedHardware:
    """The machines: GPU model (one of :data:`GPUS`), GPU count, GPUs per node, network."""

    gpu: str
    gpus: int
    gpus_per_node: int | None
    network: str | None


@dataclass(frozen=True)
class PublishedLayout:
    """The parallel layout. ``dp`` counts data-parallel (or FSDP shard) ranks, so a complete
    layout has ``dp * tp * pp * cp == gpus``; batches are in sequences."""

    dp: int
    tp: int
    pp: int
    cp: int
    zero_stage: int | None
    sequence_parallel: bool | None
    virtual_stages: int | None
    schedule: str | None
    micro_batch: int | None
    global_batch: int | None
    recompute: str | None
    precision: str
    activation_checkpointing_note: str | None = None

    @property
    def world(self) -> int:
        """``dp * tp * pp * cp``: the GPUs the layout spans."""
        return self.dp * self.tp * self.pp * self.cp


@dataclass(frozen=True)
class PublishedMeasured:
    """What the source measured; ``None`` where it states nothing.

    Attributes:
        tflops_per_gpu: 1e12 FLOP/s per GPU, counted as :attr:`flops_basis` says.
        mfu, hfu: model / hardware FLOPs utilization, fractions of the GPU's peak.
        tokens_per_s_per_gpu: training tokens per second per GPU.
        step_s: seconds per optimizer step.
        memory_gib_per_gpu: GiB per GPU as reported; :attr:`memory_kind` says what it is.
        flops_basis: ``"model"`` or ``"hardware"`` (see :data:`FLOPS_BASES`).
    """

    tflops_per_gpu: float | None = None
    mfu: float | None = None
    hfu: float | None = None
    tokens_per_s_per_gpu: float | None = None
    step_s: float | None = None
    memory_gib_per_gpu: float | None = None
    memory_kind: str | None = None
    flops_basis: str | None = None

    @property
    def memory_bytes(self) -> float | None:
        """:attr:`memory_gib_per_gpu` in bytes (``GiB = 2**30``), or ``None``."""
        return None if self.memory_gib_per_gpu is None else self.memory_gib_per_gpu * GiB


@dataclass(frozen=True)
class PublishedRun:
    """One published run: ``id`` is ``"<source>/<name>"``; ``derived`` maps a field path
    (``"layout.dp"``) to how it was inferred from stated numbers."""

    id: str
    source: str
    model: PublishedModel
    hardware: PublishedHardware
    layout: PublishedLayout
    measured: PublishedMeasured
    derived: Mapping[str, str]
    notes: str


@dataclass(frozen=True)
class PublishedSet:
    """All sources and runs of one file."""

    about: str
    sources: Mapping[str, PublishedSource]
    all_runs: tuple[PublishedRun, ...]

    def runs(self, split: str | None = None, source: str | None = None) -> tuple[PublishedRun, ...]:
        """The runs of one split (``"calibration"``/``"held_out"``) and/or one source key."""
        if split is not None and split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        if source is not None and source not in self.sources:
            raise ValueError(f"unknown source {source!r}; known: {', '.join(self.sources)}")
        return tuple(r for r in self.all_runs
                     if (split is None or self.sources[r.source].split == split)
                     and (source is None or r.source == source))


def load_published(path: str | Path | None = None) -> PublishedSet:
    """Read and validate the shipped runs (or the JSON file at ``path``).

    Raises:
        ValueError: naming the run (or source) and the field that is missing or wrong.
    """
    if path is None:
        return _load_shipped()
    return parse_published(json.loads(Path(path).read_text()))


@lru_cache(maxsize=1)
def _load_shipped() -> PublishedSet:
    text = resources.files("distlab.evidence.plan").joinpath(_DATA).read_text(encoding="utf-8")
    return parse_published(json.loads(text))


def runs(split: str | None = None, source: str | None = None) -> tuple[PublishedRun, ...]:
    """The shipped runs of one split and/or source (see :meth:`PublishedSet.runs`)."""
    return load_published().runs(split=split, source=source)


def parse_published(data: Any) -> PublishedSet:
    """Validate a decoded ``published_runs.json`` into a :class:`PublishedSet`.

    Raises:
        ValueError: naming the run (or source) and the field that is missing or wrong.
    """
    if not isinstance(data, dict):
        raise ValueError("published runs: the file must hold a JSON object")
    top = _Reader(data, "published runs")
    about = top.get("about", str)
    raw_sources = top.get("sources", dict)
    raw_runs = top.get("runs", list)
    sources = {key: _source(key, raw) for key, raw in raw_sources.items()}
    parsed: list[PublishedRun] = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_runs):
        run = _run(raw, i, sources)
        if run.id in seen:
            raise ValueError(f"published run {run.id!r}: duplicate id")
        seen.add(run.id)
        parsed.append(run)
    return PublishedSet(about, MappingProxyType(sources), tuple(parsed))


class _Reader:
    """Typed access to one JSON object, with errors that name the record and field path."""

    def __init__(self, obj: dict[str, Any], where: str, prefix: str = "") -> None:
        self.obj, self.where, self.prefix = obj, where, prefix

    def fail(self, key: str, why: str) -> ValueError:
        return ValueError(f"{self.where}: field '{self.prefix}{key}' {why}")

    def get(self, key: str, kind: type, *, optional: bool = False, required: bool = True,
            choices: tuple[Any, ...] | None = None, positive: bool = False) -> Any:
        if key not in self.obj:
            if required:
                raise self.fail(key, "is missing")
            return None
        value = self.obj[key]
        if value is None:
            if optional:
                return None
            raise self.fail(key, f"must be {kind.__name__}, got null")
        ok = (isinstance(value, (int, float)) and not isinstance(value, bool) if kind is float
              else isinstance(value, int) and not isinstance(value, bool) if kind is int
              else isinstance(value, kind))
        if not ok:
            raise self.fail(key, f"must be {kind.__name__}, got {type(value).__name__} "
                                 f"({value!r})")
        if choices is not None and value not in choices:
            raise self.fail(key, f"must be one of {choices}, got {value!r}")
        if positive and value <= 0:
            raise self.fail(key, f"must be positive, got {value!r}")
        return float(value) if kind is float else value

    def section(self, key: str) -> _Reader:
        sub = self.get(key, dict)
        return _Reader(sub, self.where, f"{self.prefix}{key}.")

    def no_extra(self, allowed: tuple[str, ...]) -> None:
        extra = sorted(set(self.obj) - set(allowed))
        if extra:
            raise self.fail(extra[0], f"is not a known field (known: {', '.join(allowed)})")


def _source(key: str, raw: Any) -> PublishedSource:
    where = f"published source {key!r}"
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: must be a JSON object")
    r = _Reader(raw, where)
    r.no_extra(("title", "authors_or_org", "year", "url", "table", "how", "split",
                "zero_stage", "states", "framework"))
    return PublishedSource(key, r.get("title", str), r.get("authors_or_org", str),
                           r.get("year", int, positive=True), r.get("url", str),
                           r.get("table", str), r.get("how", str),
                           r.get("split", str, choices=SPLITS),
                           r.get("zero_stage", int, required=False, choices=(0, 1, 2, 3)),
                           r.get("states", str, required=False, choices=tuple(STATES)),
                           r.get("framework", str, required=False,
                                 choices=tuple(FRAMEWORKS)) or "default")


def _run(raw: Any, index: int, sources: Mapping[str, PublishedSource]) -> PublishedRun:
    if not isinstance(raw, dict):
        raise ValueError(f"published run #{index}: must be a JSON object")
    run_id = raw.get("id")
    where = f"published run {run_id!r}" if isinstance(run_id, str) else f"published run #{index}"
    r = _Reader(raw, where)
    r.no_extra(("id", "source", "model", "hardware", "layout", "measured", "derived", "notes"))
    run_id = r.get("id", str)
    src = r.get("source", str)
    if src not in sources:
        raise r.fail("source", f"names no source in 'sources': {src!r}")
    if not run_id.startswith(src + "/"):
        raise r.fail("id", f"must start with its source, '{src}/'")

    m = r.section("model")
    m.no_extra(("name", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len",
                "tied_embeddings", "gated_ffn", "params_stated"))
    model = PublishedModel(
        m.get("name", str), *(m.get(k, int, positive=True) for k in (
            "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len")),
        m.get("tied_embeddings", bool), m.get("gated_ffn", bool),
        m.get("params_stated", float, optional=True, positive=True))
    if model.heads % model.kv_heads:
        raise m.fail("kv_heads", f"must divide heads ({model.heads}), got {model.kv_heads}")

    h = r.section("hardware")
    h.no_extra(("gpu", "gpus", "gpus_per_node", "network"))
    hardware = PublishedHardware(h.get("gpu", str, choices=GPUS), h.get("gpus", int, positive=True),
                                 h.get("gpus_per_node", int, optional=True, positive=True),
                                 h.get("network", str, optional=True))

    lay = r.section("layout")
    lay.no_extra(("dp", "tp", "pp", "cp", "zero_stage", "sequence_parallel", "virtual_stages",
                  "schedule", "micro_batch", "global_batch", "recompute", "precision",
                  "activation_checkpointing_note"))
    layout = PublishedLayout(
        *(lay.get(k, int, positive=True) for k in ("dp", "tp", "pp", "cp")),
        lay.get("zero_stage", int, optional=True, choices=(0, 1, 2, 3)),
        lay.get("sequence_parallel", bool, optional=True),
        lay.get("virtual_stages", int, optional=True, positive=True),
        lay.get("schedule", str, optional=True, choices=SCHEDULES),
        lay.get("micro_batch", int, optional=True, positive=True),
        lay.get("global_batch", int, optional=True, positive=True),
        lay.get("recompute", str, optional=True, choices=RECOMPUTE),
        lay.get("precision", str, choices=PRECISIONS),
        lay.get("activation_checkpointing_note", str, optional=True, required=False))

    me = r.section("measured")
    fields = ("tflops_per_gpu", "mfu", "hfu", "tokens_per_s_per_gpu", "step_s",
              "memory_gib_per_gpu")
    me.no_extra((*fields, "memory_kind", "flops_basis"))
    values = {k: me.get(k, float, optional=True, required=False, positive=True) for k in fields}
    for k in ("mfu", "hfu"):
        if values[k] is not None and values[k] > 1:
            raise me.fail(k, f"is a fraction of peak and must be <= 1, got {values[k]}")
    measured = PublishedMeasured(
        **values, memory_kind=me.get("memory_kind", str, optional=True, required=False),
        flops_basis=me.get("flops_basis", str, optional=True, required=False,
                           choices=FLOPS_BASES))
    if not any(values[k] is not None
               for k in ("tflops_per_gpu", "mfu", "tokens_per_s_per_gpu", "step_s")):
        raise me.fail("tflops_per_gpu", "or mfu, tokens_per_s_per_gpu or step_s must be given")
    if measured.memory_gib_per_gpu is not None and measured.memory_kind is None:
        raise me.fail("memory_kind", "must say what memory_gib_per_gpu measured")

    derived = r.get("derived", dict, required=False) or {}
    for key, how in derived.items():
        if not isinstance(how, str):
            raise r.fail(f"derived.{key}", f"must be str, got {type(how).__name__}")
    return PublishedRun(run_id, src, model, hardware, layout, measured,
                        MappingProxyType(dict(derived)), r.get("notes", str))
