"""Analytic inference costs from a model config alone: prefill, decode and vision FLOPs, KV-cache bytes.

FLOPs (LT-OPD App. E: one multiply-accumulate = 2 FLOPs), from the model config alone:

* LLM prefill on L tokens, per layer: attention projections ``2 L D (H + 2 KV) d_h + 2 L H d_h D``, attention
  scores and weighted values ``4 H L^2 d_h`` (dense kernels: no causal halving), SwiGLU MLP ``6 L D I``; plus
  the LM head ``2 L D V`` on every prefill position (as the plain HF forward computes it). Norms, rotary
  embeddings and activations (elementwise) are not counted, as ``FlopCounterMode`` does not count them.
* Decode of T tokens after L: the same per token, attention over L + t keys at step t.
* Vision tower, separately (pruning does not change it): each family's own formula, in its record
  (``FamilySpec.vision_flops``; the Qwen-style towers' shared terms in ``sparsectx.models.vision_costs``).

KV cache: ``2 (K and V) x layers x KV heads x d_h x L x bytes per element`` at the end of prefill.

A hybrid decoder (Qwen3.5) counts the attention terms and the KV cache on its full-attention layers only
(with their gated, twice-as-wide ``q_proj``); each linear-attention layer adds its projections, convolution
and recurrent update per token and a fixed state to the cache (``sparsectx.eval.hybrid_costs``).

In-LLM pruners (FastV, DART before layer K): layers < K run on all L prompt tokens and layers >= K on the L'
kept ones, in prefill FLOPs, in decode attention and in the KV cache; the LM head runs on the L' positions.
They choose inside the prefill (``sparsectx.pruning.layer.fused_prompts``: layers < K run once); the
``selection`` entry counts what that adds, layer K-1's keys recomputed for all L tokens, its one query row
and the row's scores, and is part of ``total``.

``counted_flops`` is the independent tally the tests hold these formulas to (``FlopCounterMode``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import PretrainedConfig

from sparsectx.eval.hybrid_costs import FULL, layer_kinds, linear_state_bytes, linear_token_flops, query_gate
from sparsectx.models.families import FAMILIES


def _dims(text: PretrainedConfig) -> tuple[int, int, int, int, int, int, int]:
    """Returns (D, H, KV, d_h, I, layers, V) of a text config (d_h = D / H where the config has none)."""
    heads = text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    return (
        text.hidden_size,
        heads,
        text.num_key_value_heads,
        head_dim,
        text.intermediate_size,
        text.num_hidden_layers,
        text.vocab_size,
    )


Late = tuple[int, int] | None
"""(K, L') of an in-LLM pruner: layers >= K hold L' tokens; None = every layer holds all of them."""


def layer_lengths(text: PretrainedConfig, seq_len: int, late: Late) -> list[int]:
    """Returns the number of tokens each decoder layer processes in a prefill of ``seq_len`` tokens."""
    layers = _dims(text)[5]
    if late is None:
        return [seq_len] * layers
    layer, kept = late
    return [seq_len if index < layer else kept for index in range(layers)]


def prefill_flops(text: PretrainedConfig, seq_len: int, late: Late) -> dict[str, float]:
    """Returns the prefill FLOPs on ``seq_len`` tokens, batch size 1, by part and their ``total``.

    Parts: ``attention_proj``, ``attention_scores``, ``mlp``, ``lm_head`` (formulas in the module docstring),
    each summed over the layers at their own lengths (``layer_lengths``).
    """
    d, h, kv, hd, inter, _, vocab = _dims(text)
    lengths = [float(n) for n in layer_lengths(text, seq_len, late)]
    kinds = layer_kinds(text)
    full = [n for n, kind in zip(lengths, kinds, strict=True) if kind == FULL]
    gate = query_gate(text)
    parts = {
        "attention_proj": sum(2 * n * d * (gate * h + 2 * kv) * hd + 2 * n * h * hd * d for n in full),
        "attention_scores": sum(4 * h * n * n * hd for n in full),
        "mlp": sum(6 * n * d * inter for n in lengths),
        "lm_head": 2 * lengths[-1] * d * vocab,
    }
    if len(full) < len(lengths):
        linear = sum(n for n, kind in zip(lengths, kinds, strict=True) if kind != FULL)
        parts.update({part: linear * per_token for part, per_token in linear_token_flops(text).items()})
    return {**parts, "total": sum(parts.values())}


def selection_flops(text: PretrainedConfig, seq_len: int) -> float:
    """Returns the FLOPs an in-LLM selection adds to the prefill: layer K-1's keys recomputed on ``seq_len``
    tokens (``2 L D KV d_h``), one query row (``2 D H d_h``) and its scores (``2 H L d_h``)."""
    d, h, kv, hd, _, _, _ = _dims(text)
    return 2 * seq_len * d * kv * hd + 2 * d * h * hd + 2 * h * seq_len * hd


def decode_flops(text: PretrainedConfig, prompt_len: int, steps: int, late: Late) -> float:
    """Returns the FLOPs of ``steps`` single-token decode steps after a ``prompt_len``-token prefill."""
    d, h, kv, hd, inter, layers, vocab = _dims(text)
    kinds = layer_kinds(text)
    full = kinds.count(FULL)
    linear = sum(linear_token_flops(text).values()) if full < layers else 0.0
    attention = 2 * d * (query_gate(text) * h + 2 * kv) * hd + 2 * h * hd * d
    per_token = full * attention + (layers - full) * linear + layers * 6 * d * inter + 2 * d * vocab
    held = [n for n, kind in zip(layer_lengths(text, prompt_len, late), kinds, strict=True) if kind == FULL]
    keys = sum(n + t + 1 for n in held for t in range(steps))
    return float(steps * per_token + 4 * h * hd * keys)


def kv_cache_bytes(text: PretrainedConfig, seq_len: int, bytes_per_element: int, late: Late) -> int:
    """Returns the KV-cache bytes after prefilling ``seq_len`` tokens (layers >= K hold L' with ``late``)."""
    _, _, kv, hd, _, _, _ = _dims(text)
    kinds = layer_kinds(text)
    held = sum(n for n, kind in zip(layer_lengths(text, seq_len, late), kinds, strict=True) if kind == FULL)
    linear = len(kinds) - kinds.count(FULL)
    states = linear * linear_state_bytes(text, bytes_per_element) if linear else 0
    return 2 * kv * hd * held * bytes_per_element + states


def check_vision_family(family: str) -> None:
    """Raises ValueError when ``family``'s record has no vision FLOPs formula (``FamilySpec.vision_flops``),
    before anything is measured, naming the families that have one."""
    if family not in FAMILIES.names() or FAMILIES.by_name(family).vision_flops is None:
        supported = sorted(spec.name for spec in FAMILIES if spec.vision_flops is not None)
        raise ValueError(
            f"mode=efficiency: no vision FLOPs formula for family {family!r}; supported: {', '.join(supported)}"
        )


def vision_flops(vision: PretrainedConfig, family: str, grids: list[tuple[int, int, int]]) -> float:
    """Returns the vision tower + merger FLOPs on images of patch grids ``grids`` (t, h, w) by ``family``'s own
    formula (``FamilySpec.vision_flops``); a family without one raises ValueError (``check_vision_family``)."""
    check_vision_family(family)
    return FAMILIES.by_name(family).vision_flops(vision, grids)


def _sdpa_flops(
    query_shape: torch.Size, key_shape: torch.Size, value_shape: torch.Size, *_: object, **__: object
) -> int:
    """Returns the FLOPs of one SDPA call: ``2 B H_q S_q S_k (d + d_v)`` (QK^T, then weights x V).

    Counted per query head, so grouped-query calls (fewer key/value heads) are counted too; some torch
    versions' own formula rejects them.
    """
    batch, heads, queries, dim = query_shape
    return 2 * batch * heads * queries * key_shape[-2] * (dim + value_shape[-1])


# torch's counter lacks the CPU flash kernel and, in some versions, grouped-query shapes: ours replaces both.
_SDPA_OPS = (
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
)
EXTRA_FORMULAS = {getattr(torch.ops.aten, op): _sdpa_flops for op in _SDPA_OPS if hasattr(torch.ops.aten, op)}


def counted_flops(fn: Callable[[], object]) -> int:
    """Returns the FLOPs ``FlopCounterMode`` counts while ``fn`` runs (CPU SDPA included)."""
    with FlopCounterMode(display=False, custom_mapping=EXTRA_FORMULAS) as counter:
        fn()
    return counter.get_total_flops()
