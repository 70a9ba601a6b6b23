"""A decoder transformer in plain torch, built from a :class:`~distlab.transformer.ModelSpec`:
what ``python -m distlab.plan --verify`` trains to check the planner's prediction.

Written the way torchtitan writes its Llama (``torchtitan/models/llama3/model.py``) and with its
module names, which are torch's test ``Transformer``'s too (so
:func:`~distlab.transformer.spec_from_module` reads the shape back, and a tensor-parallel plan
written for torchtitan applies): ``tok_embeddings``, ``layers.{i}`` blocks of
``attention_norm`` -> ``attention`` (``wq``, ``wk``, ``wv``, ``wo``) -> ``ffn_norm`` ->
``feed_forward`` (``w1``, ``w2``, and ``w3`` when gated), ``norm``, ``output``.

- Norms: ``nn.RMSNorm`` or ``nn.LayerNorm`` as the spec says (``eps`` 1e-5).
- Positions: rotary (RoPE, base 500000 as Llama 3) applied to Q and K with precomputed
  ``cos``/``sin`` buffers (real arithmetic: the same bytes autograd keeps as torchtitan's
  complex form; an odd head width, as gpt-oss-120b's preset has (2880 / 64 = 45), leaves its
  last feature unrotated), or a learned position embedding of ``spec.positions`` rows (GPT).
- Attention: ``torch.nn.functional.scaled_dot_product_attention``, causal; grouped-query heads
  are handed to the kernel as they are (``enable_gqa=True``) where the kernel reads them so, else
  repeated per query head first (:attr:`Decoder.kv_repeated` says which), as torchtitan's
  ``repeat_kv`` does.
- MLP: ``w2(silu(w1 x) * w3 x)`` (gated) or ``w2(gelu(w1 x))``.
- Mixture of experts (a spec with ``experts``): every layer from ``dense_layers`` on has, in
  place of ``feed_forward``, a ``moe`` block (torchtitan's name for it) that is
  :class:`distlab.moe.MoE` (:func:`moe_config`: a token-choice softmax router over the routed
  experts with the ``top_k`` scores normalised, SwiGLU experts ``expert_ffn`` wide stacked in a
  :class:`~distlab.moe.experts.GroupedExperts` (torch's grouped matmul where it runs), the
  shared experts as one SwiGLU; dropless, no balance loss).
- The loss (:func:`next_token_loss`): the logits cast to fp32 and cross entropy over the
  vocabulary, the 16-bit logits released before backward as torchtitan's train step does.

Parameters are created on the current default device (``with torch.device("cuda")``) and in
the default dtype; weights are drawn from a seeded normal (std 0.02) by a generator on that
device, so every rank of one device type that builds the same spec with the same seed holds the
same model.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from distlab.moe.block import MoE, MoEConfig
from distlab.transformer import ModelSpec

__all__ = ["ROPE_BASE", "Attention", "Block", "Decoder", "FeedForward", "build_decoder",
           "gqa_in_kernel", "init_parameters", "moe_config", "next_token_loss"]

ROPE_BASE = 500000.0
"""Rotary embedding base (Llama 3's ``rope_theta``)."""

NORM_EPS = 1e-5


def _norm(spec: ModelSpec) -> nn.Module:
    if spec.norm == "rmsnorm":
        return nn.RMSNorm(spec.hidden, eps=NORM_EPS)
    return nn.LayerNorm(spec.hidden, eps=NORM_EPS)


def gqa_in_kernel(device: torch.device | str, dtype: torch.dtype) -> bool:
    """Whether the attention kernel SDPA picks on ``device`` for ``dtype`` takes fewer key/value
    heads than query heads (``enable_gqa=True``) without an error: tried once on a tiny causal
    problem."""
    q = torch.zeros(1, 4, 8, 64, device=device, dtype=dtype)
    kv = torch.zeros(1, 2, 8, 64, device=device, dtype=dtype)
    try:
        F.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True)
    except (RuntimeError, TypeError):
        return False
    return True


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``(-b, a)`` of the halves ``(a, b)`` of the last dimension; an odd width's last feature
    is not rotated (zero here, its ``cos`` one and ``sin`` zero)."""
    d = x.shape[-1]
    h = d // 2
    parts = [-x[..., h:2 * h], x[..., :h]]
    if d % 2:
        parts.append(torch.zeros_like(x[..., -1:]))
    return torch.cat(parts, dim=-1)


class Attention(nn.Module):
    """Causal self-attention with ``kv_heads`` key/value heads; head counts follow the weights,
    so a tensor-parallel split leaves each rank its own heads."""

    def __init__(self, spec: ModelSpec, *, kv_in_kernel: bool = True) -> None:
        super().__init__()
        h, q, kv = spec.hidden, spec.q_width, spec.kv_width
        self.n_heads, self.n_kv_heads, self.head_dim = spec.heads, spec.kv, spec.head_width
        self.kv_in_kernel = kv_in_kernel
        self.wq = nn.Linear(h, q, bias=spec.attention_bias)
        self.wk = nn.Linear(h, kv, bias=spec.attention_bias)
        self.wv = nn.Linear(h, kv, bias=spec.attention_bias)
        self.wo = nn.Linear(q, h, bias=spec.attention_bias)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None
                ) -> torch.Tensor:
        b, s, _ = x.shape

        def heads(y: torch.Tensor) -> torch.Tensor:
            return y.view(b, s, -1, self.head_dim).transpose(1, 2)

        q, k, v = heads(self.wq(x)), heads(self.wk(x)), heads(self.wv(x))
        if rope is not None:
            cos, sin = rope
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
        groups = q.shape[1] // k.shape[1]
        if groups > 1 and not self.kv_in_kernel:
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           enable_gqa=k.shape[1] != q.shape[1])
        return self.wo(o.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    """``w2(silu(w1 x) * w3 x)`` (gated) or ``w2(gelu(w1 x))``."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        h, f = spec.hidden, spec.ffn
        self.w1 = nn.Linear(h, f, bias=spec.mlp_bias)
        self.w2 = nn.Linear(f, h, bias=spec.mlp_bias)
        if spec.gated_ffn:
            self.w3 = nn.Linear(h, f, bias=spec.mlp_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if hasattr(self, "w3"):
            return self.w2(F.silu(self.w1(x)) * self.w3(x))
        return self.w2(F.gelu(self.w1(x)))


class _MoE(MoE):
    """:class:`distlab.moe.MoE` that keeps no ``last_routing`` or ``aux_loss`` after its
    forward: nothing here reads them (the balance loss is 0), and their autograd graph would
    hold the model after the run (a cycle through autograd's nodes that Python's collector
    cannot see; under a checkpoint's recompute, which stops the forward early, a line after
    the call would not run to drop them)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("last_routing", "aux_loss"):
            value = None
        super().__setattr__(name, value)


def moe_config(spec: ModelSpec) -> MoEConfig:
    """The :class:`~distlab.moe.block.MoEConfig` of one MoE layer of ``spec`` (the module
    docstring). ``ValueError`` for a dense spec or ungated experts (the lab's experts are
    SwiGLU)."""
    if not spec.moe:
        raise ValueError(f"{spec.name} has no routed experts")
    if not spec.gated_ffn:
        raise ValueError(f"{spec.name}: distlab.moe's experts are SwiGLU (gated); "
                         "gated_ffn=False experts are not built")
    return MoEConfig(dim=spec.hidden, hidden=spec.expert_width, num_experts=spec.experts,
                     top_k=spec.top_k, normalize=True,
                     num_shared_experts=spec.shared_experts)


class Block(nn.Module):
    """Pre-norm attention and MLP (``feed_forward``, or ``moe`` with ``moe=True``), each with
    its residual."""

    def __init__(self, spec: ModelSpec, *, kv_in_kernel: bool = True, moe: bool = False
                 ) -> None:
        super().__init__()
        self.attention_norm = _norm(spec)
        self.attention = Attention(spec, kv_in_kernel=kv_in_kernel)
        self.ffn_norm = _norm(spec)
        if moe:
            self.moe = _MoE(moe_config(spec))
        else:
            self.feed_forward = FeedForward(spec)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None = None
                ) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), rope)
        mlp = self.moe if hasattr(self, "moe") else self.feed_forward
        return h + mlp(self.ffn_norm(h))


class Decoder(nn.Module):
    """The decoder of ``spec``: token ids ``(batch, seq)`` in, logits ``(batch, seq, vocab)`` out
    in the parameters' (or autocast's) dtype.

    Attributes:
        spec: the shape it was built from.
        kv_repeated: key/value heads are repeated per query head before the attention kernel
            (the kernel does not take grouped heads).
    """

    def __init__(self, spec: ModelSpec, *, kv_in_kernel: bool = True) -> None:
        super().__init__()
        self.spec = spec
        self.kv_repeated = spec.kv < spec.heads and not kv_in_kernel
        self.tok_embeddings = nn.Embedding(spec.vocab, spec.hidden)
        if spec.positions is not None:
            self.pos_embeddings = nn.Embedding(spec.positions, spec.hidden)
        else:
            self.register_buffer("rope_cos", torch.empty(spec.seq_len, spec.head_width),
                                 persistent=False)
            self.register_buffer("rope_sin", torch.empty(spec.seq_len, spec.head_width),
                                 persistent=False)
            self.init_buffers()
        self.layers = nn.ModuleList(Block(spec, kv_in_kernel=kv_in_kernel,
                                          moe=spec.is_moe_layer(i))
                                    for i in range(spec.layers))
        self.norm = _norm(spec)
        self.output = nn.Linear(spec.hidden, spec.vocab, bias=False)
        if spec.tied_embeddings:
            self.output.weight = self.tok_embeddings.weight

    def init_buffers(self) -> None:
        """Compute the rotary ``cos``/``sin`` tables where they are (again after
        ``to_empty``: a model built on the meta device has none)."""
        if self.spec.positions is not None or self.rope_cos.is_meta:
            return
        spec, dev = self.spec, self.rope_cos.device
        d = spec.head_width
        inv = 1.0 / (ROPE_BASE ** (torch.arange(0, d - d % 2, 2, dtype=torch.float32,
                                                device=dev) / d))
        angles = torch.outer(torch.arange(spec.seq_len, dtype=torch.float32, device=dev), inv)
        angles = torch.cat((angles, angles) + ((angles[:, :1] * 0,) if d % 2 else ()), dim=-1)
        with torch.no_grad():
            self.rope_cos.copy_(angles.cos())
            self.rope_sin.copy_(angles.sin())

    def rope(self, seq_len: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``(cos, sin)`` for the first ``seq_len`` positions in ``dtype``, or ``None`` with
        learned positions."""
        if self.spec.positions is not None:
            return None
        return (self.rope_cos[:seq_len].to(dtype), self.rope_sin[:seq_len].to(dtype))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(ids)
        if self.spec.positions is not None:
            h = h + self.pos_embeddings(torch.arange(ids.shape[1], device=ids.device))
        rope = self.rope(self.spec.seq_len, h.dtype)
        for layer in self.layers:
            h = layer(h, rope)
        return self.output(self.norm(h))


def init_parameters(model: nn.Module, *, seed: int = 0) -> None:
    """Seeded weights for every parameter of ``model`` where it lives (normal, std 0.02; norm
    weights one; biases zero), drawn by a generator on the parameters' device. A parameter
    split over ranks (a ``DTensor``) draws its local shard."""
    gen: dict[torch.device, torch.Generator] = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            local = p.to_local() if hasattr(p, "to_local") else p
            if local.is_meta:
                raise ValueError(f"parameter {name} is on the meta device: call "
                                 "model.to_empty(device=...) first")
            if "norm" in name and name.endswith("weight"):
                local.fill_(1.0)
            elif name.endswith("bias"):
                local.zero_()
            else:
                g = gen.get(local.device)
                if g is None:
                    g = gen[local.device] = torch.Generator(device=local.device)
                    g.manual_seed(seed)
                local.normal_(0.0, 0.02, generator=g)


def build_decoder(spec: ModelSpec, *, seed: int = 0, device: torch.device | str | None = None,
                  kv_in_kernel: bool | None = None) -> Decoder:
    """:class:`Decoder` of ``spec`` on ``device`` (default: torch's current default device;
    ``"meta"``: no memory, for :func:`init_parameters` after parallelising and ``to_empty``),
    weights from :func:`init_parameters` unless on meta. ``kv_in_kernel``: whether grouped
    key/value heads go to the kernel as they are; ``None`` asks the device
    (:func:`gqa_in_kernel`, in bf16; on meta: the host's answer)."""
    dev = torch.device(device) if device is not None else torch.empty(0).device
    if kv_in_kernel is None:
        kv_in_kernel = gqa_in_kernel("cpu" if dev.type == "meta" else dev, torch.bfloat16)
    with torch.device(dev):
        model = Decoder(spec, kv_in_kernel=kv_in_kernel)
    if dev.type != "meta":
        init_parameters(model, seed=seed)
    return model


def next_token_loss(model: nn.Module, ids: torch.Tensor, targets: torch.Tensor,
                    **kwargs: Any) -> torch.Tensor:
    """Cross entropy of ``model(ids)`` against ``targets``, the logits cast to fp32 first; the
    16-bit logits are not kept past the cast (the function's reference is dropped before it
    returns)."""
    logits = model(ids, **kwargs)
    loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(0, 1))
    del logits
    return loss
