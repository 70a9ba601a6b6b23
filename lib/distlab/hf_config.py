"""A Hugging Face ``config.json`` read as a :class:`~distlab.transformer.ModelSpec`.

:func:`read_hf_config` reads the file (or the folder holding it) and :func:`spec_from_hf_config`
maps its keys onto :class:`~distlab.transformer.ModelSpec`'s fields, for the decoder families
people train (:data:`FAMILIES`, keyed by the config's ``model_type``): Llama, Mistral, Qwen2,
Qwen3, Gemma, Gemma 2, Phi-3, and the mixtures of experts Mixtral, Qwen2-MoE, Qwen3-MoE,
DeepSeek-V2/V3 and GPT-OSS.

Every key of the config is accounted for, one of four ways:

- **read**: the shape (``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
  ``num_key_value_heads``, ``head_dim``, ``intermediate_size``, ``vocab_size``,
  ``tie_word_embeddings``, ``attention_bias``, ``mlp_bias``, the experts' keys, the sliding
  window's) and ``max_position_embeddings`` (the sequence when none is given:
  :data:`SEQ_LEN_CAP`);
- **ignored** (:data:`IGNORED_KEYS`): keys that change neither memory nor time (rotary
  frequencies and scaling, norm epsilons, token ids, the checkpoint's dtype or quantization,
  initialisation, the router's loss coefficients...), listed in one note;
- **checked**: keys that are ignored at the value every one of these releases ships and
  change memory or time at any other (a dropout above 0, ``use_sliding_window``, a
  ``decoder_sparse_step`` other than 1, ...): another value is refused by name;
- **refused**: any other key, by name, in one line (a key this reader does not know may change
  memory or time; remove it from the file if it does not).

What a family builds that :class:`~distlab.transformer.ModelSpec` cannot express at its size
is said in a note, never silently: DeepSeek's multi-head latent attention is priced as the
``deepseek-v3`` preset prices it (:data:`~distlab.transformer.PRESETS`), its multi-token
prediction layer, Qwen3's per-head query/key norms, Gemma 2's two extra norms per layer and
GPT-OSS's attention sinks and expert biases are left out (each under 0.2% of the parameters).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distlab.transformer import ModelSpec

__all__ = ["FAMILIES", "IGNORED_KEYS", "SEQ_LEN_CAP", "HfModel", "is_hf_config",
           "read_hf_config", "spec_from_hf_config"]

SEQ_LEN_CAP = 8192
"""The sequence a config is priced at when none is given: its ``max_position_embeddings``, at
most this (the convention of :data:`~distlab.transformer.PRESETS`: Llama 3's 8192 and Llama 2's
4096 are their configs' positions; Llama 3.2's 131072 is priced at 8192, the length it was
pretrained at). Each config's note says which was taken."""

FAMILIES: dict[str, str] = {
    "llama": "dense", "mistral": "dense", "qwen2": "dense", "qwen3": "dense",
    "gemma": "dense", "gemma2": "dense", "phi3": "dense",
    "mixtral": "moe", "qwen2_moe": "moe", "qwen3_moe": "moe", "deepseek_v2": "moe",
    "deepseek_v3": "moe", "gpt_oss": "moe",
}
"""The ``model_type`` values read, dense or a mixture of experts. Each builds a gated MLP
(SwiGLU, or GeGLU for Gemma: three matrices whatever ``hidden_act`` names), RMSNorm and
rotary positions."""

IGNORED_KEYS = frozenset({
    # rotary positions and norms: no parameter, no change to what is kept
    "rope_theta", "rope_scaling", "rope_parameters", "partial_rotary_factor",
    "original_max_position_embeddings", "initial_context_length", "rms_norm_eps",
    "layer_norm_eps", "hidden_act", "hidden_activation", "swiglu_limit",
    "attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar",
    # token ids, the checkpoint's storage, initialisation, inference
    "bos_token_id", "eos_token_id", "pad_token_id", "torch_dtype", "dtype",
    "transformers_version", "quantization_config", "initializer_range", "use_cache",
    "cache_implementation", "pretraining_tp", "_name_or_path", "auto_map", "architectures",
    "model_type", "tokenizer_class", "max_window_layers", "sliding_window_size",
    "_attn_implementation_autoset",
    # the router's training signal and its choice rule (the same experts are run)
    "router_aux_loss_coef", "output_router_logits", "norm_topk_prob", "aux_loss_alpha",
    "seq_aux", "scoring_func", "topk_method", "n_group", "topk_group",
    "routed_scaling_factor", "ep_size", "router_jitter_noise",
})
"""Keys that change neither memory nor time: listed in one note, not read."""

_CHECKED: dict[str, tuple[Any, ...]] = {
    "attention_dropout": (0, 0.0, None), "hidden_dropout": (0, 0.0, None),
    "resid_pdrop": (0, 0.0, None), "embd_pdrop": (0, 0.0, None),
    "use_sliding_window": (False, None), "decoder_sparse_step": (1, None),
    "moe_layer_freq": (1, None), "num_nextn_predict_layers": (0, 1, None),
}
"""Keys ignored at these values and refused at any other: dropout keeps masks, a sliding
window on Qwen's upper layers and MoE layers that are not the trailing ones are shapes
:class:`~distlab.transformer.ModelSpec` cannot express (DeepSeek-V3's one multi-token
prediction layer is left out, as the preset leaves it out, and said)."""

_SHAPE_KEYS = frozenset({
    "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "head_dim", "intermediate_size", "vocab_size", "max_position_embeddings",
    "tie_word_embeddings", "attention_bias", "mlp_bias", "sliding_window", "layer_types",
})
"""Keys every family reads."""

_EXPERT_KEYS: dict[str, frozenset[str]] = {
    "mixtral": frozenset({"num_local_experts", "num_experts_per_tok"}),
    "gpt_oss": frozenset({"num_local_experts", "num_experts_per_tok", "experts_per_token"}),
    "qwen2_moe": frozenset({"num_experts", "num_experts_per_tok", "moe_intermediate_size",
                            "shared_expert_intermediate_size", "mlp_only_layers"}),
    "qwen3_moe": frozenset({"num_experts", "num_experts_per_tok", "moe_intermediate_size",
                            "shared_expert_intermediate_size", "mlp_only_layers"}),
    "deepseek_v2": frozenset({"n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
                              "n_shared_experts", "first_k_dense_replace"}),
    "deepseek_v3": frozenset({"n_routed_experts", "num_experts_per_tok",
                              "moe_intermediate_size", "n_shared_experts",
                              "first_k_dense_replace"}),
}
"""The experts' keys each MoE family reads."""

_MLA_KEYS = frozenset({"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                       "v_head_dim"})
"""DeepSeek's multi-head latent attention: read only to say it is approximated."""

_TIED_DEFAULT = {"gemma": True, "gemma2": True}
"""``tie_word_embeddings`` where a family's config leaves it out (its class's default;
``False`` for every other family here)."""

_LEFT_OUT: dict[str, str] = {
    "qwen3": "Qwen3's per-head query and key norms ({qk} weights a layer) are left out",
    "qwen3_moe": "Qwen3's per-head query and key norms ({qk} weights a layer) are left out",
    "qwen2": "Qwen2's query, key and value biases are priced as biases on all four "
             "projections (the output projection's {h} more a layer)",
    "qwen2_moe": "Qwen2's query, key and value biases are priced as biases on all four "
                 "projections (the output projection's {h} more a layer); the shared "
                 "expert's gate ({h} weights a layer) is left out",
    "gemma2": "Gemma 2's post-attention and post-MLP norms ({h2} weights a layer) are left out",
    "gpt_oss": "GPT-OSS's attention sinks and expert biases are left out, as the gpt-oss-120b "
               "preset leaves them",
}
"""What a family builds beyond :class:`~distlab.transformer.ModelSpec`, small and said."""


@dataclass(frozen=True)
class HfModel:
    """A config read: the model and what was assumed or left out.

    Attributes:
        spec: the model.
        notes: one line each, ``"note: ..."``: the sequence taken, what a family builds that
            is approximated or left out, the keys ignored.
    """

    spec: ModelSpec
    notes: tuple[str, ...]


def is_hf_config(fields: Mapping[str, Any]) -> bool:
    """Whether ``fields`` (a JSON object) is a Hugging Face config rather than distlab's own
    dict of :class:`~distlab.transformer.ModelSpec` fields: it names a ``model_type`` or
    ``architectures``, or Hugging Face's ``hidden_size`` or ``num_hidden_layers``."""
    return any(k in fields for k in ("model_type", "architectures", "hidden_size",
                                     "num_hidden_layers"))


def read_hf_config(path: str | Path, *, seq_len: int | None = None,
                   name: str | None = None) -> HfModel:
    """Read a Hugging Face ``config.json``, or the folder holding one, as a model.

    Args:
        path: the file, or a folder with a ``config.json`` (a downloaded checkpoint).
        seq_len: tokens per sequence; ``None``: :data:`SEQ_LEN_CAP` at most.
        name: the model's name; ``None``: the config's folder when the file is called
            ``config.json`` (``Meta-Llama-3-8B/config.json``: ``Meta-Llama-3-8B``), else the
            file's stem.

    Returns:
        The :class:`HfModel` (:func:`spec_from_hf_config`).

    Raises:
        ValueError: no such file, not a JSON object, or what :func:`spec_from_hf_config`
            refuses.
    """
    p = Path(path)
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise ValueError(f"{path} is a folder without a config.json")
        p = p / "config.json"
    try:
        fields = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(fields, dict):
        raise ValueError(f"{path}: a config.json must be a JSON object")
    if name is None:
        name = p.parent.name if p.name == "config.json" and p.parent.name else p.stem
    return spec_from_hf_config(fields, name=name, seq_len=seq_len)


def spec_from_hf_config(config: Mapping[str, Any], *, name: str = "custom",
                        seq_len: int | None = None) -> HfModel:
    """Map a Hugging Face config's keys onto a :class:`~distlab.transformer.ModelSpec`.

    Args:
        config: the config's keys and values, as its ``config.json`` holds them.
        name: the model's name.
        seq_len: tokens per sequence; ``None``: the config's ``max_position_embeddings``, at
            most :data:`SEQ_LEN_CAP` (said in a note).

    Returns:
        The :class:`HfModel`: the spec and one note per assumption, approximation and the
        ignored keys.

    Raises:
        ValueError: one line naming what is refused: a ``model_type`` not in
            :data:`FAMILIES`, a missing shape key, keys that would change memory or time and
            that :class:`~distlab.transformer.ModelSpec` cannot express (a checked key at
            another value, an unknown key, a sliding window on every layer shorter than the
            sequence, MoE layers that are not the trailing ones), or a shape
            :class:`~distlab.transformer.ModelSpec` refuses.
    """
    kind = config.get("model_type")
    if kind not in FAMILIES:
        raise ValueError(f"model_type {kind!r} is not read (the families read: "
                         f"{', '.join(FAMILIES)})")
    known = _SHAPE_KEYS | IGNORED_KEYS | set(_CHECKED) | _EXPERT_KEYS.get(kind, frozenset()) \
        | (_MLA_KEYS if kind.startswith("deepseek") else frozenset())
    unknown = sorted(set(config) - known)
    if unknown:
        raise ValueError(f"{kind} config: key(s) {', '.join(unknown)} not known to distlab "
                         "(they may change memory or time; remove them if they do not)")
    bad = sorted(k for k, ok in _CHECKED.items() if k in config and config[k] not in ok)
    if bad:
        raise ValueError(f"{kind} config: {', '.join(f'{k}={config[k]!r}' for k in bad)} would "
                         "change memory or time in a way distlab's model cannot express")
    missing = sorted(k for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                 "vocab_size", "intermediate_size") if config.get(k) is None)
    if missing:
        raise ValueError(f"{kind} config: missing key(s) {', '.join(missing)}")
    notes: list[str] = []
    positions = config.get("max_position_embeddings")
    if seq_len is None:
        if not isinstance(positions, int) or positions < 1:
            raise ValueError(f"{kind} config: no max_position_embeddings: give --seq-len")
        seq_len = min(positions, SEQ_LEN_CAP)
        capped = f", capped at {SEQ_LEN_CAP}" if positions > SEQ_LEN_CAP else ""
        notes.append(f"note: sequence {seq_len} tokens (the config's max_position_embeddings "
                     f"{positions}{capped}; --seq-len sets it)")
    h, heads = config["hidden_size"], config["num_attention_heads"]
    layers = config["num_hidden_layers"]
    fields: dict[str, Any] = {
        "name": name, "layers": layers, "hidden": h, "heads": heads,
        "vocab": config["vocab_size"], "seq_len": seq_len,
        "kv_heads": config.get("num_key_value_heads") or None,
        # DeepSeek's head_dim is its rotary part; its attention is priced as the preset's
        "head_dim": None if kind.startswith("deepseek") else config.get("head_dim") or None,
        "ffn_hidden": config["intermediate_size"], "gated_ffn": True,
        "tied_embeddings": bool(config.get("tie_word_embeddings",
                                           _TIED_DEFAULT.get(kind, False))),
        "attention_bias": bool(config.get("attention_bias", kind in ("qwen2", "qwen2_moe"))),
        "mlp_bias": bool(config.get("mlp_bias", False)), "norm": "rmsnorm",
    }
    if FAMILIES[kind] == "moe":
        fields.update(_experts(kind, config, notes))
    fields.update(_window(kind, config, layers, seq_len))
    if kind.startswith("deepseek"):
        mtp = ("; its multi-token prediction layer is left out"
               if config.get("num_nextn_predict_layers") else "")
        notes.append(f"note: {kind}'s multi-head latent attention (q_lora_rank, kv_lora_rank, "
                     f"qk_rope_head_dim, ...) is priced as {heads}-head attention on the {h} "
                     f"width, as the deepseek-v3 preset prices it{mtp}")
    if kind in _LEFT_OUT:
        head = fields["head_dim"] or h // heads
        notes.append("note: " + _LEFT_OUT[kind].format(qk=2 * head, h=h, h2=2 * h))
    ignored = sorted(k for k in config if k in IGNORED_KEYS
                     or (k in _CHECKED and k != "num_nextn_predict_layers"))
    if ignored:
        notes.append(f"note: ignored (no change to memory or time): {', '.join(ignored)}")
    try:
        spec = ModelSpec(**fields)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{kind} config: {exc}") from None
    return HfModel(spec, tuple(notes))


def _experts(kind: str, config: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    """The experts' fields of an MoE family's config."""
    top_k = config.get("num_experts_per_tok")
    if kind == "gpt_oss" and config.get("experts_per_token", top_k) != top_k:
        raise ValueError(f"gpt_oss config: experts_per_token={config['experts_per_token']} and "
                         f"num_experts_per_tok={top_k} disagree")
    if kind in ("mixtral", "gpt_oss"):
        # each expert is intermediate_size wide, every layer an MoE layer
        return {"experts": config.get("num_local_experts"), "top_k": top_k}
    width = config.get("moe_intermediate_size")
    if width is None:
        raise ValueError(f"{kind} config: missing key moe_intermediate_size")
    if kind.startswith("deepseek"):
        return {"experts": config.get("n_routed_experts"), "top_k": top_k,
                "expert_ffn": width, "shared_experts": config.get("n_shared_experts") or 0,
                "dense_layers": config.get("first_k_dense_replace") or 0}
    dense = list(config.get("mlp_only_layers") or [])
    if dense != list(range(len(dense))):
        raise ValueError(f"{kind} config: mlp_only_layers={dense} are not the leading layers "
                         "(distlab's model keeps a dense MLP on the first layers only)")
    shared_width = config.get("shared_expert_intermediate_size") or 0
    if shared_width % width:
        raise ValueError(f"{kind} config: shared_expert_intermediate_size={shared_width} is "
                         f"not a multiple of moe_intermediate_size={width} (distlab's shared "
                         "experts are as wide as the routed ones)")
    if shared_width:
        notes.append(f"note: the shared expert {shared_width} wide is priced as "
                     f"{shared_width // width} shared experts {width} wide (the same "
                     "parameters and FLOPs)")
    return {"experts": config.get("num_experts"), "top_k": top_k, "expert_ffn": width,
            "shared_experts": shared_width // width, "dense_layers": len(dense)}


def _window(kind: str, config: Mapping[str, Any], layers: int, seq_len: int
            ) -> dict[str, Any]:
    """The sliding window's fields: GPT-OSS's and Gemma 2's on the even layers (from
    ``layer_types``, or Gemma 2's fixed pattern); a window on every layer is no window where
    it covers the sequence, and refused where it does not."""
    window = config.get("sliding_window")
    if kind in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe") and not config.get(
            "use_sliding_window"):
        window = None                             # Qwen's window is off unless switched on
    types = config.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers:
            raise ValueError(f"{kind} config: layer_types must list the {layers} layers' "
                             "attention")
        sliding = [i for i, t in enumerate(types) if t == "sliding_attention"]
        others = {t for t in types if t not in ("sliding_attention", "full_attention")}
        if others:
            raise ValueError(f"{kind} config: layer_types {sorted(others)} are not read")
        if not sliding or window is None:
            return {}
        if sliding != list(range(0, 2 * len(sliding), 2)):
            raise ValueError(f"{kind} config: layer_types puts the sliding window on layers "
                             f"{sliding[:6]}...: distlab's model windows the even layers from "
                             "the first only")
        return {"sliding_window": window, "sliding_layers": len(sliding)}
    if window is None:
        return {}
    if kind == "gemma2":                          # even layers slide, odd ones attend fully
        return {"sliding_window": window, "sliding_layers": (layers + 1) // 2}
    if window >= seq_len:
        return {}                                 # the window covers the whole sequence
    raise ValueError(f"{kind} config: sliding_window={window} on every layer, shorter than the "
                     f"sequence ({seq_len}): distlab's model windows every other layer only; "
                     f"give --seq-len {window} or less")
