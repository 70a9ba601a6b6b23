"""Hugging Face ``config.json`` files read as models (:mod:`distlab.hf_config`) and planned
(``python -m distlab.plan path/to/config.json``): parameter counts against the published ones,
the same spec and prices as a preset of the same model, and refusals by name.

The configs under ``data/hf/`` are the releases' ``config.json`` files as published on the
Hugging Face Hub (``huggingface.co/<org>/<model>/blob/main/config.json``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from distlab.hf_config import SEQ_LEN_CAP, is_hf_config, read_hf_config, spec_from_hf_config
from distlab.plan.__main__ import main
from distlab.transformer import PRESETS

HF = Path(__file__).parent / "data" / "hf"

# (folder, sequence it is read at, published total, published active, the active count leaves
# out the input embedding (a lookup, no product), relative tolerance, source)
PUBLISHED = [
    ("llama3-8b", None, 8.03e9, None, False, 0.001,
     "huggingface.co/meta-llama/Meta-Llama-3-8B: 8.03B params"),
    ("qwen3-8b", None, 8.2e9, None, False, 0.01,
     "huggingface.co/Qwen/Qwen3-8B model card: 8.2B (q/k norms, 9216, left out)"),
    ("qwen2-7b", None, 7.62e9, None, False, 0.001,
     "huggingface.co/Qwen/Qwen2-7B: 7.62B params"),
    ("gemma-7b", None, 8.54e9, None, False, 0.001,
     "huggingface.co/google/gemma-7b: 8.54B params (tied embedding)"),
    ("gemma-2-9b", None, 9.24e9, None, False, 0.001,
     "huggingface.co/google/gemma-2-9b: 9.24B params (2 of 4 norms a layer left out)"),
    ("phi-3-mini-4k", 2047, 3_821_079_552, None, False, 1e-9,
     "huggingface.co/microsoft/Phi-3-mini-4k-instruct: 3.82B; keras-hub's preset: "
     "3,821,079,552"),
    ("mistral-7b-v0.1", 4096, 7.24e9, None, False, 0.001,
     "huggingface.co/mistralai/Mistral-7B-v0.1: 7.24B params"),
    ("mixtral-8x7b", None, 46.7e9, 12.9e9, False, 0.002,
     "mistral.ai/news/mixtral-of-experts: 46.7B total, 12.9B per token"),
    ("qwen3-30b-a3b", None, 30.5e9, 3.3e9, False, 0.02,
     "huggingface.co/Qwen/Qwen3-30B-A3B model card: 30.5B total, 3.3B activated"),
    ("qwen1.5-moe-a2.7b", None, 14.3e9, 2.7e9, False, 0.01,
     "huggingface.co/Qwen/Qwen1.5-MoE-A2.7B model card: 14.3B total, 2.7B activated"),
    # MLA priced as 128-head attention: 18.4M more a layer than MLA's projections, 1.1B in all
    ("deepseek-v3", None, 671e9, 36.6e9, True, 0.035,
     "DeepSeek-V3 README_WEIGHTS.md: 671B total, 36.6B activated (0.9B of it the output "
     "head; the multi-token prediction module's 11.5B apart)"),
    ("gpt-oss-120b", None, 116.83e9, 5.13e9, True, 0.002,
     "openai gpt-oss model card, table 1: 116.83B total, 5.13B active (the unembedding "
     "counted, the embedding not); sinks and expert biases left out"),
]


@pytest.mark.parametrize(("folder", "seq_len", "total", "active", "no_embedding", "rel",
                          "source"), PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_parameters_are_the_published_count(folder: str, seq_len: int | None, total: float,
                                            active: float | None, no_embedding: bool,
                                            rel: float, source: str) -> None:
    """Each release's parameters as its publisher counts them, within ``rel``: the rounding of
    the published figure (3 digits: 0.1%) or what is left out or approximated (the row says
    what)."""
    spec = read_hf_config(HF / folder, seq_len=seq_len).spec
    assert spec.params == pytest.approx(total, rel=rel), source
    if active is not None:
        counted = spec.active_params - (spec.embedding_params if no_embedding else 0)
        assert counted == pytest.approx(active, rel=max(rel, 0.05 / 3.3)), source


@pytest.mark.parametrize("name", ["llama3-8b", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3",
                                  "gpt-oss-120b"])
def test_a_config_of_a_preset_reads_as_the_preset(name: str) -> None:
    """The release's config.json is the preset, field for field (the MoE presets at their
    4096-token sequence; Llama 3 8B's 8192 is its config's own)."""
    preset = PRESETS[name]
    seq_len = None if name == "llama3-8b" else preset.seq_len
    assert read_hf_config(HF / name, seq_len=seq_len).spec == preset


def test_a_config_plans_as_its_preset(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                      ) -> None:
    """``python -m distlab.plan FOLDER`` prices what the preset prices, byte for byte and
    second for second; its notes say the sequence taken and list the ignored keys in one
    line."""
    argv = ["--gpus", "8", "--global-batch", "8", "--seq-len", "2048",
            "--layout", "dp=2,tp=4,zero=1,mb=1,recompute=full"]
    docs = []
    for model in ("llama3-8b", str(HF / "llama3-8b")):
        out = tmp_path / "plan.json"
        assert main([model, *argv, "--json", str(out)]) == 0
        docs.append(json.loads(out.read_text())["layouts"])
    capsys.readouterr()
    assert docs[0] == docs[1]
    assert main([str(HF / "llama3-8b" / "config.json"), "--gpus", "8", "--top", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("# llama3-8b: 8.03B parameters, sequence 8192")
    notes = [line for line in out if line.startswith("# note:")]
    assert "# note: sequence 8192 tokens (the config's max_position_embeddings 8192; " \
        "--seq-len sets it)" in notes
    (ignored,) = [n for n in notes if "ignored" in n]
    assert "rope_theta" in ignored and "rms_norm_eps" in ignored and "bos_token_id" in ignored


def test_the_sequence_is_the_configs_positions_capped() -> None:
    """Without a sequence a config is priced at its max_position_embeddings, at most
    :data:`SEQ_LEN_CAP`, and the note says which; a given one is taken as it is."""
    read = read_hf_config(HF / "qwen3-8b")
    assert read.spec.seq_len == SEQ_LEN_CAP == 8192
    assert read.notes[0] == ("note: sequence 8192 tokens (the config's max_position_embeddings "
                             "40960, capped at 8192; --seq-len sets it)")
    read = read_hf_config(HF / "qwen3-8b", seq_len=4096)
    assert read.spec.seq_len == 4096 and not any("sequence" in n for n in read.notes)


def test_family_shapes() -> None:
    """What each family's keys become: Qwen3's head_dim (a query 4096 wide), Gemma's GeGLU
    (gated) and its tied embedding (the class default where the config is silent), Gemma 2's
    window on the even layers, Qwen2's biases, Qwen1.5-MoE's wide shared expert as four,
    DeepSeek's dense leading layers."""
    qwen3 = read_hf_config(HF / "qwen3-8b").spec
    assert (qwen3.head_width, qwen3.q_width, qwen3.kv) == (128, 4096, 8)
    gemma = read_hf_config(HF / "gemma-7b").spec
    assert gemma.gated_ffn and gemma.tied_embeddings and gemma.q_width == 4096
    gemma2 = read_hf_config(HF / "gemma-2-9b").spec
    assert (gemma2.sliding_window, gemma2.sliding_layers) == (4096, 21)
    assert read_hf_config(HF / "qwen2-7b").spec.attention_bias
    moe = read_hf_config(HF / "qwen1.5-moe-a2.7b")
    assert (moe.spec.experts, moe.spec.top_k, moe.spec.expert_ffn, moe.spec.shared_experts) \
        == (60, 4, 1408, 4)
    assert any("priced as 4 shared experts 1408 wide" in n for n in moe.notes)
    ds = read_hf_config(HF / "deepseek-v3")
    assert (ds.spec.dense_layers, ds.spec.shared_experts, ds.spec.head_dim) == (3, 1, None)
    assert any("multi-head latent attention" in n for n in ds.notes)


def test_distlabs_own_json_is_not_a_hf_config() -> None:
    assert not is_hf_config({"layers": 2, "hidden": 64, "heads": 2, "vocab": 10,
                             "seq_len": 8})
    assert is_hf_config(json.loads((HF / "llama3-8b" / "config.json").read_text()))


def _llama(**changes: object) -> dict[str, object]:
    config = json.loads((HF / "llama3-8b" / "config.json").read_text())
    config.update(changes)
    return config


@pytest.mark.parametrize(("config", "message"), [
    (_llama(model_type="gpt2"), "model_type 'gpt2' is not read"),
    (_llama(qk_layernorm=True, n_inner=5), "key(s) n_inner, qk_layernorm not known to distlab"),
    (_llama(attention_dropout=0.1), "attention_dropout=0.1 would change memory or time"),
    (_llama(hidden_size=None), "missing key(s) hidden_size"),
    (_llama(sliding_window=4096), "sliding_window=4096 on every layer, shorter than the "
                                  "sequence (8192)"),
    (_llama(layer_types=["full_attention", "sliding_attention"] * 16, sliding_window=128),
     "layer_types puts the sliding window on layers [1, 3, 5"),
    (_llama(max_position_embeddings=None), "no max_position_embeddings: give --seq-len"),
    (_llama(num_key_value_heads=5), "must be a multiple of kv_heads=5"),
])
def test_refused_by_name(config: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as info:
        spec_from_hf_config(config)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_moe_layers_that_are_not_the_trailing_ones_are_refused() -> None:
    config = json.loads((HF / "qwen3-30b-a3b" / "config.json").read_text())
    with pytest.raises(ValueError, match=r"mlp_only_layers=\[1, 3\] are not the leading"):
        spec_from_hf_config(config | {"mlp_only_layers": [1, 3]})
    assert spec_from_hf_config(config | {"mlp_only_layers": [0, 1]}).spec.dense_layers == 2
    with pytest.raises(ValueError, match="decoder_sparse_step=2"):
        spec_from_hf_config(config | {"decoder_sparse_step": 2})


def test_a_refused_config_is_one_line_and_exit_2(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(HF / "mistral-7b-v0.1"), "--gpus", "8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "give --seq-len 4096 or less" in err[0], err
    assert main([str(tmp_path), "--gpus", "8"]) == 2
    assert "is a folder without a config.json" in capsys.readouterr().err
    assert main([str(HF / "mistral-7b-v0.1"), "--gpus", "8", "--seq-len", "4096",
                 "--top", "1"]) == 0
    assert "# mistral-7b-v0.1: 7.24B parameters" in capsys.readouterr().out
