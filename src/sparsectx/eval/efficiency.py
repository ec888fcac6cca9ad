"""``mode=efficiency``: analytic FLOPs, KV-cache bytes and stage latencies per budget, relative to budget 1.0.

FLOPs (LT-OPD App. E: one multiply-accumulate = 2 FLOPs), from the model config alone:

* LLM prefill on L tokens, per layer: attention projections ``2 L D (H + 2 KV) d_h + 2 L H d_h D``, attention
  scores and weighted values ``4 H L^2 d_h`` (dense kernels: no causal halving), SwiGLU MLP ``6 L D I``; plus
  the LM head ``2 L D V`` on every prefill position (as the plain HF forward computes it). Norms, rotary
  embeddings and activations (elementwise) are not counted, as ``FlopCounterMode`` does not count them.
* Decode of T tokens after L: the same per token, attention over L + t keys at step t.
* Vision tower, separately (pruning does not change it): patch embedding, per block qkv + output projection,
  attention within each window (Qwen2.5-VL windowed blocks) or each frame (full blocks), the MLP (SwiGLU for
  Qwen2.5-VL, two-layer for Qwen3-VL), and the merger (plus one per DeepStack level for Qwen3-VL).

KV cache: ``2 (K and V) x layers x KV heads x d_h x L x bytes per element`` at the end of prefill.

A hybrid decoder (Qwen3.5) counts the attention terms and the KV cache on its full-attention layers only
(with their gated, twice-as-wide ``q_proj``); each linear-attention layer adds its projections, convolution
and recurrent update per token and a fixed state to the cache (``sparsectx.eval.hybrid_costs``).

In-LLM pruners (FastV, DART before layer K): layers < K run on all L prompt tokens and layers >= K on the L'
kept ones, in prefill FLOPs, in decode attention and in the KV cache; the LM head runs on the L' positions.
They choose inside the prefill (``sparsectx.pruning.layer.fused_prompts``: layers < K run once); the
``selection`` entry counts what that adds, layer K-1's keys recomputed for all L tokens, its one query row
and the row's scores, and is part of ``total``.

Latency per stage, batch size 1, each stage between synchronisations (``torch.cuda.synchronize`` on GPU),
median over ``repetitions`` after ``warmup`` untimed ones, then averaged over items: vision = tower + merger +
pruner signals (``adapter.encode_images``); selection = the pruner (an in-LLM one chooses in the prefill);
prefill = building the pruned context and the decode engine's prefill (``DecodeEngine.time_stages``);
decode = ``decode_tokens`` greedy engine steps (stops ignored), CUDA graphs included where
``engine.cuda_graphs`` turns them on.

Output: ``<results_root>/<experiment>/<model>/<method>/<pruner>/efficiency.json``, one row per budget.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.flop_counter import FlopCounterMode
from tqdm import tqdm
from transformers import PretrainedConfig

from sparsectx.context import build_context
from sparsectx.encoding import EncodedSample, encode_samples
from sparsectx.engine import engine_for
from sparsectx.eval.hybrid_costs import FULL, layer_kinds, linear_state_bytes, linear_token_flops, query_gate
from sparsectx.eval.protocol import eval_prompts, load_bench_items, prompt_item, select_visual
from sparsectx.eval.results import finished, provenance, write_json
from sparsectx.models import LoadedModel
from sparsectx.prompting import processor_inputs

if TYPE_CHECKING:
    from sparsectx.eval.runner import EvalJob

log = logging.getLogger(__name__)

STAGES = ("vision", "selection", "prefill", "decode")


def _dims(text: PretrainedConfig) -> tuple[int, int, int, int, int, int, int]:
    """Returns (D, H, KV, d_h, I, layers, V) of a text config (d_h = D / H where the config has none)."""
    heads = text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    return (
        text.hidden_size, heads, text.num_key_value_heads, head_dim, text.intermediate_size,
        text.num_hidden_layers, text.vocab_size,
    )  # fmt: skip


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


def _segments(vision: PretrainedConfig, grid: tuple[int, int, int], windowed: bool) -> list[int]:
    """Returns the token counts of the attention segments of one image: frames, or windows of a frame."""
    t, h, w = grid
    if not windowed:
        return [h * w] * t
    merge = vision.spatial_merge_size
    side = vision.window_size // merge // vision.patch_size  # window side in merged tokens
    rows, cols = h // merge, w // merge
    frame = [
        min(side, rows - r) * min(side, cols - c) * merge * merge
        for r in range(0, rows, side)
        for c in range(0, cols, side)
    ]
    return frame * t


def vision_flops(vision: PretrainedConfig, family: str, grids: list[tuple[int, int, int]]) -> float:
    """Returns the vision tower + merger FLOPs on images of patch grids ``grids`` (t, h, w) for ``family``
    (``qwen2_5_vl``, ``qwen3_vl`` or ``qwen3_5``: Qwen3-VL's tower without DeepStack), formulas in the module
    docstring."""
    if family not in ("qwen2_5_vl", "qwen3_vl", "qwen3_5"):
        raise KeyError(
            f"no vision FLOPs formula for family {family!r}; supported: qwen2_5_vl, qwen3_vl, qwen3_5"
        )
    dv, iv, unit = vision.hidden_size, vision.intermediate_size, vision.spatial_merge_size**2
    n = float(sum(t * h * w for t, h, w in grids))
    kernel = vision.in_channels * vision.temporal_patch_size * vision.patch_size**2
    total = 2 * n * kernel * dv
    full = set(vision.fullatt_block_indexes) if family == "qwen2_5_vl" else set(range(vision.depth))
    mlp = (6 if family == "qwen2_5_vl" else 4) * n * dv * iv
    for block in range(vision.depth):
        segments = [s for grid in grids for s in _segments(vision, grid, block not in full)]
        total += 8 * n * dv * dv + 4 * dv * sum(float(s) ** 2 for s in segments) + mlp
    mergers = 1 + (len(vision.deepstack_visual_indexes) if family == "qwen3_vl" else 0)
    merged = n / unit
    total += mergers * (2 * merged * (unit * dv) ** 2 + 2 * merged * unit * dv * vision.out_hidden_size)
    return total


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


def _sync(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


@torch.no_grad()
def measure_item(
    job: EvalJob,
    loaded: LoadedModel,
    sample: EncodedSample,
    vision_inputs: tuple[torch.Tensor, torch.Tensor],
    budget: float,
) -> dict[str, Any]:
    """Returns one item's median stage latencies (ms), prefill length and kept tokens at ``budget``.

    With ``efficiency.count_flops`` also the prefill FLOPs counted by ``FlopCounterMode``.
    """
    cfg, device = job.cfg, loaded.adapter.model.device
    engine, steps = (
        engine_for(loaded.adapter, loaded.processor.tokenizer, cfg.engine),
        cfg.efficiency.decode_tokens,
    )
    times: dict[str, list[float]] = {stage: [] for stage in STAGES}
    for rep in range(cfg.efficiency.warmup + cfg.efficiency.repetitions):
        t0 = _sync(device)
        fresh = replace(sample, images=loaded.adapter.encode_images(*vision_inputs))
        t1 = _sync(device)
        prompts, _ = eval_prompts(loaded.adapter, [fresh], cfg.pruner, budget, cfg.seed, cfg.efficiency.bench)
        t2 = _sync(device)
        prefill, decode = engine.time_stages(prompts, steps)
        if rep >= cfg.efficiency.warmup:
            spans = (t1 - t0, t2 - t1, prefill, decode)
            for stage, seconds in zip(STAGES, spans, strict=True):
                times[stage].append(1000.0 * seconds)
    # The counted context: the same choice, made first (an in-LLM one in its own pass over layers < K).
    selection = select_visual(loaded.adapter, [fresh], cfg.pruner, budget, cfg.seed, cfg.efficiency.bench)
    ctx = build_context(loaded.adapter, [fresh], selection)
    drop = ctx.inputs.late
    out = {
        "latency_ms": {stage: statistics.median(values) for stage, values in times.items()},
        "prefill_len": int(ctx.inputs.embeds.shape[1]),
        "kept_visual": int(ctx.kept_visual.sum()),
        "late": None if drop is None else [drop.layer, int(drop.keep.sum())],
    }
    out["latency_ms"]["total"] = sum(out["latency_ms"].values())
    if cfg.efficiency.count_flops:
        # The LM head on the positions the last layer holds (all of them, or the L' kept from layer K on).
        held = ctx.inputs.attention_mask.bool() if drop is None else drop.keep
        out["counted_prefill_flops"] = counted_flops(
            lambda: loaded.adapter.logits(loaded.adapter.run_llm(ctx.inputs, None)[held])
        )
    return out


def efficiency_path(root: str | Path, experiment: str, model: str, method: str, pruner: str) -> Path:
    """Returns the efficiency JSON of a (model, method, pruner): beside its budget leaves."""
    return Path(root) / experiment / model / method / pruner / "efficiency.json"


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def budget_row(
    loaded: LoadedModel,
    budget: float,
    grids: list[list[tuple[int, int, int]]],
    measures: list[dict[str, Any]],
    steps: int,
) -> dict[str, Any]:
    """Returns one budget's averages over items: FLOPs by stage, KV-cache bytes, latencies, kept tokens."""
    config = loaded.adapter.model.config
    text, family = config.get_text_config(), loaded.adapter.family
    lengths = [m["prefill_len"] for m in measures]
    late = [None if m["late"] is None else tuple(m["late"]) for m in measures]
    prefill = [prefill_flops(text, n, drop) for n, drop in zip(lengths, late, strict=True)]
    flops = {
        "vision": _mean([vision_flops(config.vision_config, family, g) for g in grids]),
        "selection": _mean(
            [0.0 if d is None else selection_flops(text, n) for n, d in zip(lengths, late, strict=True)]
        ),
        "prefill": _mean([p["total"] for p in prefill]),
        "prefill_parts": {part: _mean([p[part] for p in prefill]) for part in prefill[0] if part != "total"},
        "decode": _mean([decode_flops(text, n, steps, d) for n, d in zip(lengths, late, strict=True)]),
    }
    flops["total"] = flops["vision"] + flops["selection"] + flops["prefill"] + flops["decode"]
    row = {
        "budget": budget,
        "kept_visual": _mean([m["kept_visual"] for m in measures]),
        "prefill_len": _mean(lengths),
        "flops": flops,
        "kv_cache_bytes": _mean(
            [
                kv_cache_bytes(text, n, loaded.adapter.model.dtype.itemsize, d)
                for n, d in zip(lengths, late, strict=True)
            ]
        ),
        "latency_ms": {k: _mean([m["latency_ms"][k] for m in measures]) for k in measures[0]["latency_ms"]},
    }
    if "counted_prefill_flops" in measures[0]:
        row["counted_prefill_flops"] = _mean([m["counted_prefill_flops"] for m in measures])
    return row


def with_ratios(row: dict[str, Any], reference: dict[str, Any]) -> dict[str, Any]:
    """Returns ``row`` with ``ratios`` to the unpruned ``reference`` row (FLOPs, KV cache, each latency)."""
    latency = {k: v / reference["latency_ms"][k] for k, v in row["latency_ms"].items()}
    ratios = {
        "prefill_flops": row["flops"]["prefill"] / reference["flops"]["prefill"],
        "total_flops": row["flops"]["total"] / reference["flops"]["total"],
        "kv_cache": row["kv_cache_bytes"] / reference["kv_cache_bytes"],
        "latency": latency,
    }
    return {**row, "ratios": ratios}


def run_efficiency(job: EvalJob) -> Path:
    """Returns the efficiency JSON after measuring every budget (and the unpruned model) on the same items."""
    cfg, eff = job.cfg, job.cfg.efficiency
    key, chash = job.key_hash(eff.bench)
    out = efficiency_path(cfg.results_root, cfg.experiment, cfg.model.name, cfg.method_name, cfg.pruner.name)
    if not cfg.force and finished(out, chash):
        log.info("efficiency: finished with config %s, skipping", chash)
        return out
    started = time.perf_counter()
    items = load_bench_items(cfg.bench[eff.bench], cfg.max_skip_fraction)[0][: eff.num_items]
    loaded, info = job.model()
    device = loaded.adapter.model.device
    budgets = sorted(set(eff.budgets) | {1.0}, reverse=True)
    measures: dict[float, list[dict[str, Any]]] = {budget: [] for budget in budgets}
    grids = []
    for item in tqdm(items, desc="efficiency", unit="item"):
        prompt = prompt_item(item, cfg.prompt, with_image=True)
        batch = processor_inputs(loaded.processor, [prompt])
        sample = encode_samples(loaded.adapter, loaded.processor, [prompt])[0]
        vision_inputs = (batch["pixel_values"].to(device), batch["image_grid_thw"].to(device))
        grids.append([tuple(g) for g in batch["image_grid_thw"].tolist()])
        for budget in budgets:  # budgets back to back on one item: the same machine state for each
            measures[budget].append(measure_item(job, loaded, sample, vision_inputs, budget))
    rows = {b: budget_row(loaded, b, grids, measures[b], eff.decode_tokens) for b in budgets}
    payload = {
        "model": info, "method": cfg.method_name, "pruner": cfg.pruner.name, "bench": eff.bench,
        "num_items": len(items), "repetitions": eff.repetitions, "warmup": eff.warmup,
        "decode_tokens": eff.decode_tokens, "reference_budget": 1.0,
        "budgets": [with_ratios(rows[b], rows[1.0]) for b in budgets],
        "provenance": provenance(job.resolved, key, cfg.model.device),
        "wall_time_s": time.perf_counter() - started,
    }  # fmt: skip
    write_json(out, payload)
    columns = ["budget", "prefill_flops_ratio", "kv_cache_ratio", "latency_ratio", "latency_ms"]
    table = [
        [r["budget"], r["ratios"]["prefill_flops"], r["ratios"]["kv_cache"], r["ratios"]["latency"]["total"],
         r["latency_ms"]["total"]]
        for r in payload["budgets"]
    ]  # fmt: skip
    job.tracker().log_table("efficiency", columns, table)
    return out
