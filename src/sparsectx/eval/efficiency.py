"""``mode=efficiency``: analytic FLOPs, KV-cache bytes and stage latencies per budget, relative to budget 1.0.

FLOPs, KV-cache bytes and the vision tower's FLOPs come from ``sparsectx.eval.costs`` (formulas there).

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
from tqdm import tqdm
from transformers import BatchFeature

from sparsectx.context import build_context
from sparsectx.data import Item
from sparsectx.encoding import EncodedSample, encode_samples, encode_visual
from sparsectx.engine import engine_for
from sparsectx.eval.costs import (
    check_vision_family,
    counted_flops,
    decode_flops,
    kv_cache_bytes,
    prefill_flops,
    selection_flops,
    vision_flops,
)
from sparsectx.eval.protocol import eval_prompts, load_bench_items, prompt_item, select_visual, video_source
from sparsectx.eval.results import finished, provenance, write_json
from sparsectx.models import LoadedModel
from sparsectx.models.video_input import check_video_family
from sparsectx.prompting import processor_inputs
from sparsectx.visual import ImageTokens

if TYPE_CHECKING:
    from sparsectx.eval.runner import EvalJob

log = logging.getLogger(__name__)

STAGES = ("vision", "selection", "prefill", "decode")


def _sync(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


@torch.no_grad()
def measure_item(
    job: EvalJob,
    loaded: LoadedModel,
    sample: EncodedSample,
    encode: Callable[[], list[ImageTokens]],
    budget: float,
) -> dict[str, Any]:
    """Returns one item's median stage latencies (ms), prefill length and kept tokens at ``budget``.

    ``encode`` re-runs the vision tower on the item's visual inputs (``visual_encoder``), the timed vision
    stage. With ``efficiency.count_flops`` also the prefill FLOPs counted by ``FlopCounterMode``.
    """
    cfg, device = job.cfg, loaded.adapter.model.device
    engine, steps = (
        engine_for(loaded.adapter, loaded.processor.tokenizer, cfg.engine),
        cfg.efficiency.decode_tokens,
    )
    times: dict[str, list[float]] = {stage: [] for stage in STAGES}
    for rep in range(cfg.efficiency.warmup + cfg.efficiency.repetitions):
        t0 = _sync(device)
        fresh = replace(sample, images=encode())
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


def visual_encoder(
    loaded: LoadedModel, batch: BatchFeature
) -> tuple[Callable[[], list[ImageTokens]], list[tuple[int, int, int]]]:
    """Returns a function that encodes one prompt's visual inputs as ``encode_samples`` orders them (videos,
    then images; ``encoding.encode_visual``) and their patch grids (t, h, w), which the vision FLOPs formula
    counts. The pixels move to the device here, once, so the timed calls measure the tower alone."""
    device = loaded.adapter.model.device
    on_device = BatchFeature({k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()})
    grids = [
        tuple(g) for key in ("video_grid_thw", "image_grid_thw") if key in batch for g in batch[key].tolist()
    ]

    def encode() -> list[ImageTokens]:
        videos, images = encode_visual(loaded.adapter, on_device)
        return [*videos, *images]

    return encode, grids


def measure_budgets(job: EvalJob, loaded: LoadedModel, items: list[Item]) -> list[dict[str, Any]]:
    """Returns one row per budget, the unpruned 1.0 first, each with its ratios to 1.0 (``with_ratios``).

    Every budget is measured on the same items back to back, so each sees the same machine state; the
    benchmark script ``scripts/bench_efficiency.py`` calls this on random weights of the real sizes.
    """
    cfg, eff = job.cfg, job.cfg.efficiency
    check_vision_family(loaded.adapter.family)
    budgets = sorted(set(eff.budgets) | {1.0}, reverse=True)
    measures: dict[float, list[dict[str, Any]]] = {budget: [] for budget in budgets}
    video = video_source(cfg.bench[eff.bench])
    if video is not None:
        check_video_family(loaded.adapter.family, f"bench.{eff.bench}.video")
    grids = []
    for item in tqdm(items, desc=f"efficiency {cfg.pruner.name}", unit="item"):
        prompt = prompt_item(item, cfg.bench[eff.bench].layout.prompt, cfg.prompt, with_image=True, video=video)
        batch = processor_inputs(loaded.processor, [prompt])
        sample = encode_samples(loaded.adapter, loaded.processor, [prompt], batch)[0]
        encode, item_grids = visual_encoder(loaded, batch)
        grids.append(item_grids)
        for budget in budgets:
            measures[budget].append(measure_item(job, loaded, sample, encode, budget))
    rows = {b: budget_row(loaded, b, grids, measures[b], eff.decode_tokens) for b in budgets}
    return [with_ratios(rows[b], rows[1.0]) for b in budgets]


def run_efficiency(job: EvalJob) -> Path:
    """Returns the efficiency JSON after measuring every budget (and the unpruned model) on the same items."""
    cfg, eff = job.cfg, job.cfg.efficiency
    key, chash = job.key_hash(eff.bench)
    out = efficiency_path(cfg.results_root, cfg.experiment, cfg.model.name, cfg.method_name, cfg.pruner.name)
    if not cfg.force and finished(out, chash):
        log.info("efficiency: finished with config %s, skipping", chash)
        return out
    started = time.perf_counter()
    items = load_bench_items(cfg.bench[eff.bench], cfg.max_skip_fraction).items[: eff.num_items]
    loaded, info = job.model()
    payload = {
        "model": info, "method": cfg.method_name, "pruner": cfg.pruner.name, "bench": eff.bench,
        "num_items": len(items), "repetitions": eff.repetitions, "warmup": eff.warmup,
        "decode_tokens": eff.decode_tokens, "reference_budget": 1.0,
        "budgets": measure_budgets(job, loaded, items),
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
