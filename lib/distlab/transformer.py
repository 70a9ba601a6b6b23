"""A decoder transformer: its shape, parameters and FLOPs.

:class:`ModelSpec` is distlab's one description of a transformer, read by every model that
prices a layer: the planner (:mod:`distlab.plan`), tensor parallelism's collectives and
activation bytes (:mod:`distlab.tensor_parallel.cost`, :mod:`distlab.tensor_parallel.memory`).
It holds the layers, hidden size, attention heads, their width and key/value heads
(grouped-query attention), the MLP's inner size and whether it is gated (SwiGLU: three
matrices), vocabulary, sequence length, tied embeddings, and for a mixture of experts (MoE)
the routed experts of each MoE layer, how many each token is sent to (top-k), each expert's
inner width, the shared experts every token runs through and the leading layers that keep a
dense MLP (the vocabulary of :mod:`distlab.moe`: a token-choice router, grouped experts,
shared experts), and the layers whose attention looks back over a sliding window of tokens
only (GPT-OSS's). :func:`attention_score_flops` is the one count of the attention's ``s^2``
products, full or windowed.
:data:`PRESETS` names common open models by their published configurations;
:func:`model_spec` resolves a preset name, a dict or a spec once at the public boundary, and
:func:`spec_from_module` reads the same description from a real ``nn.Module``.

Counts are elements (parameters) and floating-point operations (a multiply-add is 2 FLOPs);
nothing here knows about GPUs or layouts.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from distlab._checks import check_bool, check_choice, check_int, check_str

__all__ = ["MOE_FIELDS", "MOE_SOURCES", "NORMS", "PRESETS", "Linear", "ModelSpec",
           "attention_score_flops", "layer_linears", "layer_matmul_flops", "model_spec",
           "moe_layer_matmul_flops", "per_op_saved_linears", "routed_expert_flops",
           "spec_from_module"]

NORMS = ("layernorm", "rmsnorm")
"""Layer norm (a weight and a bias per element) or RMSNorm (a weight only)."""


@dataclass(frozen=True)
class ModelSpec:
    """One decoder-only transformer.

    Attributes:
        name: what it is called (a preset's key, or the user's name).
        layers: transformer blocks ``l``.
        hidden: ``h``, the model width (elements).
        heads: ``a``, query heads (``hidden`` a multiple of it unless ``head_dim`` is given).
        vocab: ``v``, vocabulary size.
        seq_len: ``s``, tokens per sequence.
        kv_heads: key/value heads (grouped-query attention); ``None``: ``heads``.
        ffn_hidden: the MLP's inner size; ``None``: ``4 * hidden``.
        gated_ffn: a gated MLP (SwiGLU: gate, up and down matrices) instead of two.
        tied_embeddings: the output layer reuses the input embedding's matrix.
        attention_bias: the Q, K, V and output projections have biases (GPT: yes; Llama: no).
        mlp_bias: the MLP's matrices have biases.
        norm: ``"layernorm"`` (a weight and a bias) or ``"rmsnorm"`` (a weight).
        positions: rows of a learned position embedding (GPT: the longest sequence it
            takes); ``None``: rotary positions, nothing to learn.
        experts: routed experts of each MoE layer; 0: a dense model (the default; every
            other MoE field then keeps its default).
        top_k: routed experts each token is sent to (1 to ``experts``).
        expert_ffn: each expert's inner width (an expert is an MLP like the dense one, gated
            where ``gated_ffn``); ``None``: ``ffn_hidden``.
        shared_experts: experts of width ``expert_ffn`` that every token runs through
            (DeepSeek's), beside the routed ones.
        dense_layers: the leading layers whose MLP is the dense one (``ffn_hidden`` wide);
            the other ``layers - dense_layers`` are MoE layers.
        head_dim: elements per attention head (query, key and value heads alike), as a Hugging
            Face config's ``head_dim``; ``None``: ``hidden / heads``. Given, the query
            projection is ``heads * head_dim`` wide (:attr:`q_width`), which need not be
            ``hidden`` (Qwen3's MoE models and GPT-OSS: wider). Kept ``None`` where it equals
            ``hidden / heads``, so such a spec equals (and prints as) one that leaves it out.
        sliding_window: tokens a sliding-window layer's query attends to, itself and the
            ``sliding_window - 1`` before it (a Hugging Face config's ``sliding_window``);
            ``None``: every layer attends to the whole causal prefix (the default).
        sliding_layers: how many layers use the window, every other layer from the first
            (GPT-OSS's ``layer_types``: sliding, full, sliding, ...; at most ``ceil(layers /
            2)``); 0 without a window. The window changes the attention's ``s^2`` products
            only (:func:`attention_score_flops`), no parameter.
    """

    name: str
    layers: int
    hidden: int
    heads: int
    vocab: int
    seq_len: int
    kv_heads: int | None = None
    ffn_hidden: int | None = None
    gated_ffn: bool = False
    tied_embeddings: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    norm: str = "rmsnorm"
    positions: int | None = None
    experts: int = 0
    top_k: int = 0
    expert_ffn: int | None = None
    shared_experts: int = 0
    dense_layers: int = 0
    head_dim: int | None = None
    sliding_window: int | None = None
    sliding_layers: int = 0

    def __post_init__(self) -> None:
        check_str("name", self.name, nonempty=True)
        for name in ("layers", "hidden", "heads", "vocab", "seq_len"):
            check_int(name, getattr(self, name), minimum=1)
        if self.head_dim is not None:
            check_int("head_dim", self.head_dim, minimum=1)
            if self.hidden % self.heads == 0 and self.head_dim == self.hidden // self.heads:
                object.__setattr__(self, "head_dim", None)   # the default, stated
        elif self.hidden % self.heads:
            raise ValueError(f"hidden={self.hidden} must be a multiple of heads={self.heads} "
                             f"(each head hidden / heads wide), or give head_dim")
        kv = self.heads if self.kv_heads is None else check_int("kv_heads", self.kv_heads,
                                                                 minimum=1)
        if self.heads % kv:
            raise ValueError(f"heads={self.heads} must be a multiple of kv_heads={kv} "
                             "(each key/value head serves a whole group of query heads)")
        object.__setattr__(self, "kv_heads", kv)
        ffn = 4 * self.hidden if self.ffn_hidden is None else check_int(
            "ffn_hidden", self.ffn_hidden, minimum=1)
        object.__setattr__(self, "ffn_hidden", ffn)
        for name in ("gated_ffn", "tied_embeddings", "attention_bias", "mlp_bias"):
            check_bool(name, getattr(self, name))
        if self.positions is not None:
            check_int("positions", self.positions, minimum=1)
            if self.positions < self.seq_len:
                raise ValueError(f"{self.name} learns positions for {self.positions} tokens "
                                 f"(a learned position embedding has one row per position), "
                                 f"so seq_len={self.seq_len} is too long: at most "
                                 f"{self.positions}")
        check_choice("norm", self.norm, NORMS)
        self._check_experts()
        self._check_window()

    def _check_window(self) -> None:
        if self.sliding_window is None:
            if self.sliding_layers != 0:
                raise ValueError(f"sliding_layers={self.sliding_layers!r} needs a "
                                 "sliding_window: give the window's tokens, or sliding_layers=0")
            return
        check_int("sliding_window", self.sliding_window, minimum=1)
        check_int("sliding_layers", self.sliding_layers, minimum=1,
                  maximum=(self.layers + 1) // 2)

    def _check_experts(self) -> None:
        experts = check_int("experts", self.experts, minimum=0)
        if experts == 0:
            for name, dense in (("top_k", 0), ("expert_ffn", None), ("shared_experts", 0),
                                ("dense_layers", 0)):
                if getattr(self, name) != dense:
                    raise ValueError(f"{name}={getattr(self, name)!r} needs routed experts: "
                                     f"give experts >= 1 (experts=0 is a dense model)")
            return
        check_int("top_k", self.top_k, minimum=1, maximum=experts)
        if self.mlp_bias:
            raise ValueError("mlp_bias with experts: biased experts are not modelled; give "
                             "mlp_bias=False")
        check_int("shared_experts", self.shared_experts, minimum=0)
        check_int("dense_layers", self.dense_layers, minimum=0, maximum=self.layers - 1)
        width = self.ffn if self.expert_ffn is None else check_int(
            "expert_ffn", self.expert_ffn, minimum=1)
        object.__setattr__(self, "expert_ffn", width)

    # resolved fields, typed as ints for readers
    @property
    def kv(self) -> int:
        """Key/value heads (``kv_heads`` resolved)."""
        assert self.kv_heads is not None  # set in __post_init__
        return self.kv_heads

    @property
    def ffn(self) -> int:
        """The MLP's inner size (``ffn_hidden`` resolved)."""
        assert self.ffn_hidden is not None  # set in __post_init__
        return self.ffn_hidden

    @property
    def moe(self) -> bool:
        """Whether the model has routed experts."""
        return self.experts > 0

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts (0 for a dense model)."""
        return self.layers - self.dense_layers if self.moe else 0

    @property
    def expert_width(self) -> int:
        """Each expert's inner width (``expert_ffn`` resolved; ``ffn`` for a dense model)."""
        return self.expert_ffn if self.expert_ffn is not None else self.ffn

    def is_moe_layer(self, index: int) -> bool:
        """Whether layer ``index`` (0-based) is an MoE layer: every layer from
        ``dense_layers`` on, in a model with experts."""
        return self.moe and index >= self.dense_layers

    def moe_layers_in(self, start: int, stop: int) -> int:
        """How many of layers ``start .. stop - 1`` are MoE layers (:meth:`is_moe_layer`), in
        closed form."""
        return max(0, stop - max(start, self.dense_layers)) if self.moe else 0

    def is_sliding_layer(self, index: int) -> bool:
        """Whether layer ``index`` (0-based) attends over :attr:`sliding_window` tokens only:
        the even layers from the first, ``sliding_layers`` of them."""
        return self.sliding_window is not None and index % 2 == 0 \
            and index // 2 < self.sliding_layers

    def sliding_layers_in(self, start: int, stop: int) -> int:
        """How many of layers ``start .. stop - 1`` are sliding-window layers
        (:meth:`is_sliding_layer`), in closed form."""
        stop = min(stop, 2 * self.sliding_layers)
        return max(0, (stop + 1) // 2 - (start + 1) // 2)

    @property
    def head_width(self) -> int:
        """Elements per head (``head_dim`` resolved: ``hidden / heads`` where not given)."""
        return self.hidden // self.heads if self.head_dim is None else self.head_dim

    @property
    def q_width(self) -> int:
        """Width of the query projection and of the attention's output (the output
        projection's input), ``heads * head_dim``; ``hidden`` unless ``head_dim`` says
        otherwise."""
        return self.heads * self.head_width

    @property
    def kv_width(self) -> int:
        """Width of the key (and of the value) projection, ``kv_heads * head_dim``."""
        return self.kv * self.head_width

    # parameters
    @property
    def norm_params(self) -> int:
        """Parameters of one norm (weight, and bias for a layer norm)."""
        return self.hidden * (2 if self.norm == "layernorm" else 1)

    @property
    def attention_params(self) -> int:
        """Q, K, V and output projections of one layer: ``h q + 2 h k + q h`` (``q`` the
        query width, ``k`` the key/value width), biases ``q + 2 k + h`` where
        ``attention_bias``."""
        h, q, k = self.hidden, self.q_width, self.kv_width
        weights = h * q + 2 * h * k + q * h
        return weights + ((q + 2 * k + h) if self.attention_bias else 0)

    @property
    def mlp_params(self) -> int:
        """The MLP of one layer: ``2 h f`` (``3 h f`` gated), biases where ``mlp_bias``."""
        h, f = self.hidden, self.ffn
        mats = 3 if self.gated_ffn else 2
        weights = mats * h * f
        return weights + (((mats - 1) * f + h) if self.mlp_bias else 0)

    @property
    def layer_params(self) -> int:
        """One transformer block with the dense MLP: attention, MLP and its two norms."""
        return self.attention_params + self.mlp_params + 2 * self.norm_params

    @property
    def expert_params(self) -> int:
        """One expert: ``2 h e`` (``3 h e`` gated) with ``e`` = :attr:`expert_width`; no
        biases (grouped experts carry none)."""
        return (3 if self.gated_ffn else 2) * self.hidden * self.expert_width

    @property
    def router_params(self) -> int:
        """The router's gate of one MoE layer: ``h x experts``."""
        return self.hidden * self.experts

    @property
    def moe_layer_params(self) -> int:
        """One MoE block: attention, the routed and shared experts, the router, two norms
        (0 for a dense model)."""
        if not self.moe:
            return 0
        return (self.attention_params + (self.experts + self.shared_experts)
                * self.expert_params + self.router_params + 2 * self.norm_params)

    @property
    def routed_expert_params(self) -> int:
        """Every routed expert's parameters in the model, all MoE layers (the parameters
        expert parallelism divides)."""
        return self.moe_layers * self.experts * self.expert_params

    @property
    def embedding_params(self) -> int:
        """The input embedding (``v h``) and the learned positions (``positions * h``)."""
        return (self.vocab + (self.positions or 0)) * self.hidden

    @property
    def output_params(self) -> int:
        """The final norm and the output layer (``v h``, none when tied)."""
        return self.norm_params + (0 if self.tied_embeddings else self.vocab * self.hidden)

    @property
    def params(self) -> int:
        """Every parameter of the model (elements)."""
        dense = self.layers - self.moe_layers
        return (dense * self.layer_params + self.moe_layers * self.moe_layer_params
                + self.embedding_params + self.output_params)

    @property
    def active_params(self) -> int:
        """The parameters one token runs through (elements): :attr:`params` with ``top_k``
        of the routed experts of each MoE layer instead of all of them (equal to
        :attr:`params` for a dense model)."""
        idle = self.moe_layers * (self.experts - self.top_k) * self.expert_params
        return self.params - idle

    # FLOPs
    def forward_flops(self, tokens_per_sequence: int | None = None, *,
                      causal: bool = False) -> int:
        """FLOPs of one forward pass over one sequence: every layer's matrix products
        (:func:`layer_matmul_flops`, the sliding-window layers' attention windowed) and the
        output layer's ``2 s h v``; the embedding lookup, norms and softmax are left out (they
        are under 1% at these widths). ``causal``: the attention's products as a causal kernel
        computes them (:func:`attention_score_flops`)."""
        s = self.seq_len if tokens_per_sequence is None else check_int(
            "tokens_per_sequence", tokens_per_sequence, minimum=1)
        dense = self.layers - self.moe_layers
        moe = self.moe_layers * moe_layer_matmul_flops(self, s, causal=causal) if self.moe else 0
        windowed = self.sliding_layers * (
            attention_score_flops(self, s, causal=causal)
            - attention_score_flops(self, s, causal=causal, sliding=True))
        return (dense * layer_matmul_flops(self, s, causal=causal) + moe - windowed
                + 2 * s * self.hidden * self.vocab)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict (resolved: ``kv_heads`` and ``ffn_hidden`` set; the
        expert fields only for a model with experts; ``head_dim`` only where it is not
        ``hidden / heads``)."""
        out = asdict(self)
        if not self.moe:
            for name in MOE_FIELDS:
                del out[name]
        if self.head_dim is None:
            del out["head_dim"]
        if self.sliding_window is None:
            del out["sliding_window"], out["sliding_layers"]
        return out


MOE_FIELDS = ("experts", "top_k", "expert_ffn", "shared_experts", "dense_layers")
""":class:`ModelSpec`'s fields that describe its experts."""


def attention_score_flops(spec: ModelSpec, seq_len: int, *, causal: bool = False,
                          sliding: bool = False) -> int:
    """FLOPs of one layer's attention products over one sequence of ``seq_len`` tokens:
    ``Q K^T`` and the product with V, ``2 q`` FLOPs each per (query, key) pair (``q`` the
    query width, :attr:`ModelSpec.q_width`).

    A full layer counts every pair of the ``s x s`` matrix, ``4 s^2 q``, as every source
    counts it; ``causal`` counts the half a kernel that skips the masked blocks computes,
    ``2 s^2 q``. A sliding-window layer (``sliding`` on a model with a
    :attr:`~ModelSpec.sliding_window` ``w``) pairs each query with the ``w`` latest keys only:
    causal, the band of the causal half, ``4 q (s w - w^2 / 2)``; counted whole, twice that
    (the count whose half the causal kernel computes, as for a full layer). A window of ``s``
    tokens or more is the full layer. The model's layers: :meth:`ModelSpec.is_sliding_layer`.
    """
    s = check_int("seq_len", seq_len, minimum=1)
    q, w = spec.q_width, spec.sliding_window
    if not sliding or w is None or w >= s:
        return 4 * s * s * q // (2 if causal else 1)
    band = 4 * q * s * w - 2 * q * w * w         # causal: the pairs 0 <= i - j < w
    return band if causal else 2 * band


def layer_matmul_flops(spec: ModelSpec, seq_len: int, *, causal: bool = False,
                       sliding: bool = False) -> int:
    """FLOPs of one layer's forward over one sequence of ``seq_len`` tokens.

    ``2 s h (2 q + 2 k)`` for Q, K, V and the output projection (``q`` the query width,
    ``heads * head_dim``, ``h`` unless ``head_dim`` says otherwise; ``k`` the key/value width),
    :func:`attention_score_flops` for ``Q K^T`` and the product with V (``4 s^2 q``; half of
    it with ``causal``, as a kernel that skips the masked half runs; windowed for a
    ``sliding`` layer), and ``2 s h f`` per MLP matrix (3 gated, else 2).
    """
    s = check_int("seq_len", seq_len, minimum=1)
    h, q, k, f = spec.hidden, spec.q_width, spec.kv_width, spec.ffn
    projections = 2 * s * h * (2 * q + 2 * k)
    scores = attention_score_flops(spec, s, causal=causal, sliding=sliding)
    mlp = 2 * s * h * f * (3 if spec.gated_ffn else 2)
    return projections + scores + mlp


def routed_expert_flops(spec: ModelSpec, seq_len: int) -> int:
    """FLOPs of one MoE layer's routed experts over one sequence of ``seq_len`` tokens, forward:
    each token through ``top_k`` experts, ``2 s h e`` per expert matrix (3 gated, else 2);
    the grouped matrix products expert parallelism spreads (0 for a dense model)."""
    s = check_int("seq_len", seq_len, minimum=1)
    mats = 3 if spec.gated_ffn else 2
    return spec.top_k * 2 * s * spec.hidden * spec.expert_width * mats if spec.moe else 0


def moe_layer_matmul_flops(spec: ModelSpec, seq_len: int, *, causal: bool = False,
                           sliding: bool = False) -> int:
    """FLOPs of one MoE layer's forward over one sequence (:func:`layer_matmul_flops` with the
    MLP replaced): the attention as a dense layer's, the router's ``2 s h E``, the shared
    experts' ``2 s h e`` per matrix each and :func:`routed_expert_flops` (at the active
    parameter count: ``top_k`` experts per token, not all of them)."""
    s = check_int("seq_len", seq_len, minimum=1)
    h, mats = spec.hidden, (3 if spec.gated_ffn else 2)
    dense_mlp = 2 * s * h * spec.ffn * mats
    attention = layer_matmul_flops(spec, s, causal=causal, sliding=sliding) - dense_mlp
    shared = spec.shared_experts * 2 * s * h * spec.expert_width * mats
    return attention + 2 * s * h * spec.experts + shared + routed_expert_flops(spec, s)


@dataclass(frozen=True)
class Linear:
    """One matrix product of a layer: ``in_features`` to ``out_features`` per token;
    ``column`` for a linear tensor parallelism splits by its outputs (Q, K, V, the MLP's first
    linears), else row-parallel (split by its inputs: the output projection, the MLP's last)."""

    name: str
    in_features: int
    out_features: int
    column: bool
    bias: bool = False


def layer_linears(spec: ModelSpec) -> tuple[Linear, ...]:
    """The layer's matrix products in the order its forward runs them (Llama's and torchtitan's
    order: ``wq, wk, wv``, the output projection, then ``w1`` (gate), ``w3`` (up), ``w2``
    (down), or a two-matrix MLP's two), with the model's biases."""
    h, q, k, f = spec.hidden, spec.q_width, spec.kv_width, spec.ffn
    ab, mb = spec.attention_bias, spec.mlp_bias
    attention = (Linear("q", h, q, True, ab), Linear("k", h, k, True, ab),
                 Linear("v", h, k, True, ab), Linear("output projection", q, h, False, ab))
    if spec.gated_ffn:
        mlp = (Linear("gate", h, f, True, mb), Linear("up", h, f, True, mb),
               Linear("down", f, h, False, mb))
    else:
        mlp = (Linear("first MLP linear", h, f, True, mb),
               Linear("second MLP linear", f, h, False, mb))
    return attention + mlp


def per_op_saved_linears(spec: ModelSpec) -> tuple[tuple[Linear, bool], ...]:
    """Each of :func:`layer_linears` with whether torchtitan's per-op checkpointing policy keeps
    its output: the policy counts ``aten.mm`` calls and keeps the odd-numbered ones. A linear
    with a bias runs as ``aten.addmm``, which the policy neither counts nor keeps."""
    out, mm = [], 0
    for lin in layer_linears(spec):
        if not lin.bias:
            mm += 1
        out.append((lin, not lin.bias and mm % 2 == 1))
    return tuple(out)


def _llama(name: str, layers: int, hidden: int, heads: int, kv: int, ffn: int, vocab: int,
           seq_len: int, *, tied: bool = False) -> ModelSpec:
    return ModelSpec(name, layers, hidden, heads, vocab, seq_len, kv_heads=kv, ffn_hidden=ffn,
                     gated_ffn=True, tied_embeddings=tied)


def _gpt(name: str, layers: int, hidden: int, heads: int, vocab: int = 51200,
         seq_len: int = 2048) -> ModelSpec:
    return ModelSpec(name, layers, hidden, heads, vocab, seq_len, tied_embeddings=True,
                     attention_bias=True, mlp_bias=True, norm="layernorm", positions=seq_len)


PRESETS: dict[str, ModelSpec] = {
    # Meta's published configurations (config.json / params.json of each release).
    "llama3.2-1b": _llama("llama3.2-1b", 16, 2048, 32, 8, 8192, 128256, 8192, tied=True),
    "llama3.2-3b": _llama("llama3.2-3b", 28, 3072, 24, 8, 8192, 128256, 8192, tied=True),
    "llama3-8b": _llama("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192),
    "llama3-70b": _llama("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192),
    "llama3-405b": _llama("llama3-405b", 126, 16384, 128, 8, 53248, 128256, 8192),
    "llama2-7b": _llama("llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096),
    "llama2-70b": _llama("llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096),
    # GPT-3's table 2.1 (Brown et al. 2020) shapes, with Megatron's padded vocabulary.
    "gpt3-1.3b": _gpt("gpt3-1.3b", 24, 2048, 16),
    "gpt3-6.7b": _gpt("gpt3-6.7b", 32, 4096, 32),
    "gpt3-13b": _gpt("gpt3-13b", 40, 5120, 40),
    "gpt3-175b": _gpt("gpt3-175b", 96, 12288, 96),
    # mixtures of experts, from each release's config.json (MOE_SOURCES); seq_len is the
    # sequence the published training runs use, 4096
    "deepseek-v3": ModelSpec("deepseek-v3", 61, 7168, 128, 129280, 4096, ffn_hidden=18432,
                             gated_ffn=True, experts=256, top_k=8, expert_ffn=2048,
                             shared_experts=1, dense_layers=3),
    "qwen3-30b-a3b": ModelSpec("qwen3-30b-a3b", 48, 2048, 32, 151936, 4096, kv_heads=4,
                               ffn_hidden=6144, gated_ffn=True, experts=128, top_k=8,
                               expert_ffn=768, head_dim=128),
    "qwen3-235b-a22b": ModelSpec("qwen3-235b-a22b", 94, 4096, 64, 151936, 4096, kv_heads=4,
                                 ffn_hidden=12288, gated_ffn=True, experts=128, top_k=8,
                                 expert_ffn=1536, head_dim=128),
    "mixtral-8x7b": ModelSpec("mixtral-8x7b", 32, 4096, 32, 32000, 4096, kv_heads=8,
                              ffn_hidden=14336, gated_ffn=True, experts=8, top_k=2),
    "gpt-oss-120b": ModelSpec("gpt-oss-120b", 36, 2880, 64, 201088, 4096, kv_heads=8,
                              ffn_hidden=2880, gated_ffn=True, attention_bias=True,
                              experts=128, top_k=4, head_dim=64, sliding_window=128,
                              sliding_layers=18),
}
"""Named models. Llama: gated MLP, RMSNorm, rotary positions, untied output (Llama 3 8B ...
405B with grouped-query attention, 8 key/value heads; Llama 3.2 1B and 3B tie the output layer
to the embedding, as their config.json says). GPT-3: two-matrix MLP with GeLU, layer
norms and biases, learned positions (as many as the sequence), tied embeddings, vocabulary
51200 (GPT-2's 50257 padded as Megatron pads it).

Mixtures of experts (:data:`MOE_SOURCES`), approximated where their attention is not a plain
grouped-query one: DeepSeek-V3's multi-head latent attention (MLA: low-rank query and key/value
projections, 192-wide query/key heads) is priced as 128-head attention on the 7168 width
(its projections' parameters within about 10%, its ``s^2`` products fewer than MLA's: an
approximation, not MLA); Qwen3's and GPT-OSS's heads are as their config.json's ``head_dim``
says, 128 and 64 wide (``head_dim``: a query width of ``heads * head_dim``, 4096 for
Qwen3-30B-A3B, 8192 for Qwen3-235B-A22B, 4096 for GPT-OSS-120B, wider than ``hidden``);
GPT-OSS's sliding-window layers are as its config.json says (``sliding_window`` 128 on the
18 even layers of its ``layer_types``: their attention's ``s^2`` products become ``s * 128``
ones), its attention sinks and expert biases are left out.
Multi-token prediction (DeepSeek-V3's extra layer) is left out."""

MOE_SOURCES: dict[str, str] = {
    "deepseek-v3": "https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json "
                   "(61 layers, hidden 7168, 128 heads, 256 routed experts top-8, 1 shared, "
                   "moe_intermediate_size 2048, first_k_dense_replace 3, intermediate_size "
                   "18432, vocab 129280)",
    "qwen3-30b-a3b": "https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json "
                     "(48 layers, hidden 2048, 32 heads, 4 kv heads, head_dim 128, 128 "
                     "experts top-8, moe_intermediate_size 768, vocab 151936)",
    "qwen3-235b-a22b": "https://huggingface.co/Qwen/Qwen3-235B-A22B/blob/main/config.json "
                       "(94 layers, hidden 4096, 64 heads, 4 kv heads, head_dim 128, 128 "
                       "experts top-8, moe_intermediate_size 1536, vocab 151936)",
    "mixtral-8x7b": "https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json "
                    "(32 layers, hidden 4096, 32 heads, 8 kv heads, 8 experts top-2, "
                    "intermediate_size 14336, vocab 32000)",
    "gpt-oss-120b": "https://huggingface.co/openai/gpt-oss-120b/blob/main/config.json "
                    "(36 layers, hidden 2880, 64 heads, 8 kv heads, head_dim 64, 128 "
                    "experts top-4, intermediate_size 2880, vocab 201088, attention bias, "
                    "sliding_window 128 on the even layers of layer_types)",
}
"""Where each MoE preset's shape comes from (the release's published configuration)."""


def model_spec(model: ModelSpec | str | dict[str, Any], *, seq_len: int | None = None
               ) -> ModelSpec:
    """Resolve ``model`` into a :class:`ModelSpec`: a spec itself, a key of :data:`PRESETS`, or
    a dict of :class:`ModelSpec`'s fields (``name`` optional). ``seq_len`` overrides the
    sequence length. Raises ``ValueError`` naming a bad preset or field."""
    if isinstance(model, ModelSpec):
        spec = model
    elif isinstance(model, str):
        spec = PRESETS[check_choice("model", model, PRESETS)]
    elif isinstance(model, dict):
        known = {f.name for f in fields(ModelSpec)}
        unknown = sorted(set(model) - known)
        if unknown:
            raise ValueError(f"model: unknown field(s) {', '.join(unknown)}; the fields are "
                             f"{', '.join(sorted(known))}")
        missing = sorted({"layers", "hidden", "heads", "vocab", "seq_len"} - set(model)
                         - ({"seq_len"} if seq_len is not None else set()))
        if missing:
            raise ValueError(f"model: missing field(s) {', '.join(missing)}")
        values = {"name": "custom", **model}
        if seq_len is not None:
            values["seq_len"] = seq_len
        spec = ModelSpec(**values)
    else:
        raise TypeError(f"model must be a ModelSpec, a preset name ({', '.join(PRESETS)}) or "
                        f"a dict of fields, got {type(model).__name__}")
    if seq_len is not None and seq_len != spec.seq_len:
        spec = replace(spec, seq_len=check_int("seq_len", seq_len, minimum=1))
    return spec


def spec_from_module(module: Any, *, seq_len: int, name: str | None = None) -> ModelSpec:
    """Read a :class:`ModelSpec` from a real decoder ``nn.Module``.

    Recognised: a module with a ``config`` holding Hugging Face's field names
    (``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``,
    ``num_key_value_heads``, ``head_dim``, ``intermediate_size``, ``vocab_size``,
    ``tie_word_embeddings``), or torch's test ``Transformer`` shape (``layers``, an
    ``tok_embeddings`` embedding, blocks with ``attention.wq`` and ``feed_forward.w1``/
    ``w2``/``w3``). The parameter count of the result is checked against the module's own,
    so a module this reader misunderstands raises ``ValueError`` instead of planning wrongly.
    """
    seq_len = check_int("seq_len", seq_len, minimum=1)
    spec = _from_hf_config(module, seq_len, name) or _from_blocks(module, seq_len, name)
    if spec is None:
        raise ValueError(f"cannot read a transformer's shape from {type(module).__name__}: "
                         "give a dict of layers, hidden, heads, kv_heads, ffn_hidden, vocab")
    counted = sum(p.numel() for p in module.parameters())
    if counted != spec.params:
        raise ValueError(f"{type(module).__name__} has {counted:,} parameters but the shape "
                         f"read from it ({spec}) has {spec.params:,}: give the shape as a dict")
    return spec


def _from_hf_config(module: Any, seq_len: int, name: str | None) -> ModelSpec | None:
    cfg = getattr(module, "config", None)
    if cfg is None or not hasattr(cfg, "num_hidden_layers"):
        return None
    act = str(getattr(cfg, "hidden_act", "silu"))
    return ModelSpec(
        name or str(getattr(cfg, "model_type", type(module).__name__)),
        cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.vocab_size,
        seq_len, kv_heads=getattr(cfg, "num_key_value_heads", None) or None,
        head_dim=getattr(cfg, "head_dim", None) or None,
        ffn_hidden=getattr(cfg, "intermediate_size", None),
        gated_ffn=act in ("silu", "swiglu"),
        tied_embeddings=bool(getattr(cfg, "tie_word_embeddings", False)),
        attention_bias=bool(getattr(cfg, "attention_bias", False)),
        mlp_bias=bool(getattr(cfg, "mlp_bias", False)),
        norm="rmsnorm" if hasattr(cfg, "rms_norm_eps") else "layernorm")


def _from_blocks(module: Any, seq_len: int, name: str | None) -> ModelSpec | None:
    emb = getattr(module, "tok_embeddings", None)
    layers = getattr(module, "layers", None)
    if emb is None or layers is None or len(layers) == 0:
        return None
    block = layers[0]
    attn, ff = getattr(block, "attention", None), getattr(block, "feed_forward", None)
    if attn is None or ff is None or not hasattr(attn, "wq"):
        return None
    vocab, hidden = emb.weight.shape
    heads = int(getattr(attn, "n_heads", 0) or getattr(module, "n_heads", 0) or 0)
    if heads <= 0:
        return None
    head_dim = attn.wq.weight.shape[0] // heads
    kv_heads = attn.wk.weight.shape[0] // head_dim
    gated = hasattr(ff, "w3")
    ffn_hidden = ff.w1.weight.shape[0]
    output = getattr(module, "output", None)
    tied = output is not None and getattr(output, "weight", None) is emb.weight
    norm_mod = getattr(block, "attention_norm", None)
    norm = "layernorm" if getattr(norm_mod, "bias", None) is not None else "rmsnorm"
    pos = getattr(module, "pos_embeddings", None)
    return ModelSpec(name or type(module).__name__, len(layers), hidden, heads, vocab, seq_len,
                     kv_heads=kv_heads, head_dim=head_dim, ffn_hidden=ffn_hidden,
                     gated_ffn=gated,
                     tied_embeddings=tied, attention_bias=attn.wq.bias is not None,
                     mlp_bias=ff.w1.bias is not None, norm=norm,
                     positions=None if pos is None else int(pos.weight.shape[0]))
