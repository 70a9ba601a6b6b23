"""The published runs the planner is calibrated and judged on: every run loads, names a real
source, has a consistent layout and at least one measurement; both splits cover A100 and H100,
FSDP and tensor/pipeline layouts; malformed files fail with the run and field named."""

from __future__ import annotations

import copy
import json
import re
from importlib import resources

import pytest

from distlab.evidence.plan.published import (
    GPUS,
    PublishedRun,
    PublishedSet,
    load_published,
    parse_published,
    runs,
)
from helpers.paths import ROOT

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

PEAK_16BIT_TFLOPS = {"A100-40GB-SXM": 312.0, "A100-80GB-SXM": 312.0, "H100-80GB-SXM": 989.4,
                     "H100-96GB-HBM2e": 989.4, "H200-141GB-SXM": 989.4}
"""Dense 16-bit data-sheet peaks the sources divide by (torchtitan uses the SXM H100 peak for
its HBM2e H100), TFLOP/s."""


@pytest.fixture(scope="module")
def published() -> PublishedSet:
    return load_published()


@pytest.fixture()
def raw() -> dict:
    text = resources.files("distlab.evidence.plan").joinpath("data/published_runs.json").read_text()
    return json.loads(text)


def _is_a100(run: PublishedRun) -> bool:
    return run.hardware.gpu.startswith("A100")


def _is_h100(run: PublishedRun) -> bool:
    return run.hardware.gpu.startswith("H100")


def _is_fsdp(run: PublishedRun) -> bool:
    """Pure sharded data parallelism: ZeRO-3 / FSDP full shard and no model parallelism."""
    return run.layout.zero_stage == 3 and run.layout.tp == run.layout.pp == 1


def _is_model_parallel(run: PublishedRun) -> bool:
    return run.layout.tp > 1 or run.layout.pp > 1


def test_every_run_loads_with_a_unique_id_and_a_real_source(published):
    assert len(published.all_runs) >= 40
    ids = [r.id for r in published.all_runs]
    assert len(ids) == len(set(ids))
    for run in published.all_runs:
        assert run.source in published.sources, run.id
        assert run.id.startswith(run.source + "/"), run.id
        assert run.notes.strip(), f"{run.id}: notes are empty"
    assert set(published.sources) == {r.source for r in published.all_runs}, \
        "every source must contribute at least one run"


def test_sources_are_cited(published):
    assert len(published.sources) >= 6
    for key, src in published.sources.items():
        assert src.url.startswith("https://"), key
        assert src.title and src.table and src.how, key
        assert 2017 <= src.year <= 2030, key


def test_layout_multiplies_to_the_gpu_count_or_the_notes_say_why(published):
    for run in published.all_runs:
        if run.layout.world != run.hardware.gpus:
            assert "dp*tp*pp*cp" in run.notes, \
                f"{run.id}: {run.layout.world} != {run.hardware.gpus} GPUs and notes say nothing"


def test_global_batch_is_whole_micro_batches_per_data_parallel_rank(published):
    for run in published.all_runs:
        lay = run.layout
        if lay.micro_batch is not None and lay.global_batch is not None:
            assert lay.global_batch % (lay.micro_batch * lay.dp) == 0, run.id


def test_every_run_has_a_throughput_mfu_or_step_time(published):
    for run in published.all_runs:
        m = run.measured
        assert any(v is not None for v in (m.tflops_per_gpu, m.mfu, m.tokens_per_s_per_gpu,
                                           m.step_s)), run.id
        if m.memory_gib_per_gpu is not None:
            assert m.memory_kind, run.id
            assert m.memory_bytes == m.memory_gib_per_gpu * 2**30


def test_tflops_and_mfu_agree_with_the_gpu_peak(published):
    """Where a source gives both, TFLOP/s over utilization is the GPU's 16-bit peak (within
    rounding): a check on the transcription."""
    checked = 0
    for run in published.all_runs:
        m = run.measured
        util = m.mfu if m.flops_basis == "model" else m.hfu
        if m.tflops_per_gpu is None or util is None or run.layout.precision == "fp8":
            continue
        peak = PEAK_16BIT_TFLOPS[run.hardware.gpu]
        assert m.tflops_per_gpu / util == pytest.approx(peak, rel=0.05), run.id
        checked += 1
    assert checked >= 30


def test_splits_each_cover_a100_h100_fsdp_and_tensor_pipeline_runs(published):
    for split in ("calibration", "held_out"):
        chosen = published.runs(split=split)
        assert chosen, split
        assert any(_is_a100(r) for r in chosen), f"{split}: no A100 run"
        assert any(_is_h100(r) for r in chosen), f"{split}: no H100 run"
        assert any(_is_fsdp(r) for r in chosen), f"{split}: no FSDP/ZeRO-3 run"
        assert any(_is_model_parallel(r) for r in chosen), f"{split}: no TP/PP run"
        assert any(r.measured.memory_gib_per_gpu is not None for r in chosen), \
            f"{split}: no run with memory per GPU"
    held = {r.source for r in published.runs(split="held_out")}
    assert 0.2 <= len(held) / len(published.sources) <= 0.5
    assert len(published.runs("calibration")) + len(published.runs("held_out")) == \
        len(published.all_runs)


def test_runs_filters_by_split_and_source(published):
    assert runs() == published.all_runs
    for key, src in published.sources.items():
        of_source = runs(source=key)
        assert of_source and all(r.source == key for r in of_source)
        assert runs(split=src.split, source=key) == of_source
        other = "held_out" if src.split == "calibration" else "calibration"
        assert runs(split=other, source=key) == ()
    with pytest.raises(ValueError, match="split"):
        runs(split="test")
    with pytest.raises(ValueError, match="unknown source"):
        runs(source="nowhere")


def test_known_gpus_only(published):
    assert {r.hardware.gpu for r in published.all_runs} <= set(GPUS)


def test_the_json_ships_as_package_data():
    assert resources.files("distlab.evidence.plan").joinpath("data/published_runs.json").is_file()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "evidence/plan/data/*.json" in pyproject["tool"]["setuptools"]["package-data"]["distlab"]


def _first_id(raw: dict) -> str:
    return re.escape(raw["runs"][0]["id"])


def test_a_missing_field_names_the_run_and_the_field(raw):
    run_id = _first_id(raw)
    del raw["runs"][0]["layout"]["tp"]
    with pytest.raises(ValueError, match=rf"{run_id}.*layout\.tp.*missing"):
        parse_published(raw)


@pytest.mark.parametrize(("section", "key", "value"), [
    ("layout", "tp", "8"), ("layout", "tp", True), ("model", "hidden", 4096.5),
    ("hardware", "gpus", None), ("measured", "mfu", "44%"), ("model", "tied_embeddings", 1)])
def test_a_wrong_type_names_the_run_and_the_field(raw, section, key, value):
    run_id = _first_id(raw)
    raw["runs"][0][section][key] = value
    with pytest.raises(ValueError, match=rf"{run_id}.*{section}\.{key}"):
        parse_published(raw)


@pytest.mark.parametrize(("section", "key", "value", "why"), [
    ("layout", "precision", "tf32", "one of"), ("hardware", "gpu", "V100", "one of"),
    ("measured", "mfu", 43.0, "fraction"), ("layout", "dp", 0, "positive"),
    ("layout", "zero_stage", 4, "one of"), ("model", "kv_heads", 7, "divide")])
def test_a_bad_value_names_the_run_and_the_field(raw, section, key, value, why):
    run_id = _first_id(raw)
    raw["runs"][0][section][key] = value
    with pytest.raises(ValueError, match=rf"{run_id}.*{section}\.{key}.*{why}"):
        parse_published(raw)


def test_structural_errors_name_the_run(raw):
    run_id = _first_id(raw)
    bad = copy.deepcopy(raw)
    bad["runs"][0]["source"] = "nowhere"
    with pytest.raises(ValueError, match=rf"{run_id}.*source"):
        parse_published(bad)
    bad = copy.deepcopy(raw)
    bad["runs"].append(copy.deepcopy(bad["runs"][0]))
    with pytest.raises(ValueError, match=rf"{run_id}.*duplicate"):
        parse_published(bad)
    bad = copy.deepcopy(raw)
    bad["runs"][0]["measured"] = {"memory_gib_per_gpu": 40.0, "memory_kind": "peak"}
    with pytest.raises(ValueError, match=rf"{run_id}.*must be given"):
        parse_published(bad)
    bad = copy.deepcopy(raw)
    bad["runs"][0]["layout"]["tensor_parallel"] = 8
    with pytest.raises(ValueError, match=rf"{run_id}.*tensor_parallel.*not a known field"):
        parse_published(bad)
    bad = copy.deepcopy(raw)
    bad["sources"][bad["runs"][0]["source"]]["split"] = "test"
    with pytest.raises(ValueError, match="split"):
        parse_published(bad)


def test_load_published_reads_a_given_file(tmp_path, raw, published):
    path = tmp_path / "runs.json"
    path.write_text(json.dumps(raw))
    assert load_published(path) == published


def test_a_source_states_what_its_configuration_sets_for_rows_that_state_none(raw, published):
    """Megatron Bridge 25.11's configuration (v0.2.0) runs the distributed optimizer with bf16
    gradients: its rows that state no FSDP are priced at ZeRO 1 with ``"mixed"`` states and say
    so; its FSDP row keeps its own stage; NeMo 24.07's shards its optimizer (ZeRO 1) and states no
    gradient dtype; a source that states nothing keeps ZeRO 0 and fp32 gradients; a bad stage or
    states is refused, named."""
    from distlab.evidence.plan.runs import run_inputs

    bridge = published.sources["megatron_bridge_25_11"]
    assert (bridge.zero_stage, bridge.states) == (1, "mixed")
    assert "use_distributed_optimizer=True" in bridge.how
    assert "grad_reduce_in_fp32 = False" in bridge.how
    for run in runs(source="megatron_bridge_25_11"):
        i = run_inputs(run)
        if run.layout.zero_stage is None:
            assert (i.layout.zero, i.layout.precision) == (1, "mixed")
            assert "zero 1 (its source's configuration)" in i.assumed
        else:
            assert i.layout.zero == run.layout.zero_stage
    nemo = published.sources["nemo_24_07"]     # Apex's distributed Adam, its gradients unstated
    assert (nemo.zero_stage, nemo.states) == (1, None) and "distributed_fused_adam" in nemo.how
    for run in runs(source="nemo_24_07"):
        assert (run_inputs(run).layout.zero, run_inputs(run).layout.precision) == (
            1, "mixed-fp32-grads")
    for run in runs(source="nemo_long_sequence_2024"):   # a source that states neither
        i = run_inputs(run)
        assert (i.layout.zero, i.layout.precision) == (0, "mixed-fp32-grads")
        assert "zero 0 (unstated)" in i.assumed
    for field, value in (("zero_stage", 4), ("states", "bf16"), ("framework", "jax")):
        bad = copy.deepcopy(raw)
        bad["sources"]["megatron_bridge_25_11"][field] = value
        with pytest.raises(ValueError, match=rf"megatron_bridge_25_11.*{field}"):
            parse_published(bad)


def test_a_sources_framework_prices_its_runs_memory(published: PublishedSet) -> None:
    """Each source's runs are priced with what the code they ran with keeps: Megatron-Core's
    fused SwiGLU where the configuration sets ``bias_activation_fusion`` (NeMo 24.07 and 24.03.01,
    Megatron Bridge 25.11; each source's how names the file), torch's modules for torchtitan's
    runs, the defaults where the source states nothing; the judge's memory is that one."""
    from distlab.evidence.plan.judged import judge_run
    from distlab.evidence.plan.runs import memory_options, run_inputs
    from distlab.plan.memory import FRAMEWORKS, memory_per_gpu

    expected = {"nemo_24_07": "megatron", "nemo_long_sequence_2024": "megatron",
                "megatron_bridge_25_11": "megatron", "torchtitan_perf_2024": "torch",
                "torchtitan_bench_2024_12": "torch", "torchtitan_asynctp_2025_06": "torch",
                "torchtitan_h200_trainy_2025_06": "torch"}
    for key, source in published.sources.items():
        assert source.framework == expected.get(key, "default"), key
        if source.framework == "megatron":
            assert "bias_activation_fusion" in source.how, key
    for key in ("nemo_24_07", "torchtitan_bench_2024_12", "narayanan2021"):
        run = runs(source=key)[0]
        i = run_inputs(run)
        assert memory_options(run) == FRAMEWORKS[expected.get(key, "default")]
        judged = judge_run(i, published.sources[key].split)
        assert judged.model_total_bytes == memory_per_gpu(i.model, i.layout, i.hardware,
                                                          **memory_options(run)).total
