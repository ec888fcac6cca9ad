"""``mode=efficiency``: analytic FLOPs, KV-cache bytes and stage latencies per budget, relative to budget 1.0.

FLOPs, KV-cache bytes and the vision tower's FLOPs come from ``sparsectx.eval.costs`` (formulas there).

Latency per stage, batch size 1, each stage ended by a synchronisation (``torch.cuda.synchronize`` on GPU),
``warmup`` untimed repetitions first. Which items, what is decoded, which stages and which statistic are the
protocol's (``efficiency.protocol``, ``sparsectx.eval.efficiency_protocol``):

* ``ltopd`` (LT-OPD App. E.1): the questions whose most frequent human answer has at least
  ``min_answer_tokens`` tokens; each request timed from the processor's CPU tensors: transfer (pixels to the
  device), vision (``encode_samples``), selection (the pruner; an in-LLM one chooses in the prefill), prefill
  (building the pruned context and the engine's prefill), decode (the replay of a ``decode_tokens``-token
  reference, ``DecodeEngine.time_replay``) and text (the output read back and detokenised); mean over
  repetitions, then over questions.
* ``quick``: the first items; vision = tower + merger + pruner signals (``adapter.encode_images``) on pixels
  already on the device, selection, prefill, decode = ``decode_tokens`` greedy engine steps (stops ignored,
  ``DecodeEngine.time_stages``); median over repetitions, then mean over items.

CUDA graphs are included where ``engine.cuda_graphs`` turns them on. Every row keeps each item's timed
repetitions (``repetitions_ms``), so any other statistic can be recomputed from the file.

Output: ``<results_root>/<experiment>/<model>/<method>/<pruner>/efficiency.json``, one row per budget.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
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
from sparsectx.eval.efficiency_protocol import (
    SELECTION,
    STAGES,
    STATISTIC,
    question_answer,
    reference_ids,
    select_questions,
    summarize,
)
from sparsectx.eval.protocol import eval_prompts, load_bench_items, prompt_item, select_visual, video_source
from sparsectx.eval.results import finished, provenance, write_json
from sparsectx.models import LoadedModel
from sparsectx.models.video_input import check_video_family
from sparsectx.prompting import PromptItem, processor_inputs
from sparsectx.visual import ImageTokens

if TYPE_CHECKING:
    from sparsectx.eval.runner import EvalJob

log = logging.getLogger(__name__)

VISUAL_INPUTS = ("pixel_values", "pixel_values_videos")
"""The processor's visual tensors: what ``ltopd``'s transfer stage moves (ids and grids move inside
``encode_samples``, as in every request)."""


@dataclass
class Request:
    """One measured item, prepared once before any clock starts."""

    prompt: PromptItem
    batch: BatchFeature
    """The processor's output on the CPU (``ltopd`` times its transfer)."""
    sample: EncodedSample
    """The item encoded once: the counted context's (``quick``'s timed runs re-encode its visual inputs)."""
    encode: Callable[[], list[ImageTokens]]
    """``quick``'s timed vision stage: the tower on the item's pixels already on the device (``visual_encoder``)."""
    reference: torch.Tensor | None
    """``ltopd``: the (decode_tokens,) reference ids replayed, on the CPU; None under ``quick``."""


def _sync(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def _time_quick(
    job: EvalJob, loaded: LoadedModel, request: Request, budget: float
) -> tuple[list[float], EncodedSample]:
    """Returns one ``quick`` repetition's stage seconds (``STAGES["quick"]``) and the sample it encoded."""
    cfg, device = job.cfg, loaded.adapter.model.device
    engine = engine_for(loaded.adapter, loaded.processor.tokenizer, cfg.engine)
    t0 = _sync(device)
    fresh = replace(request.sample, images=request.encode())
    t1 = _sync(device)
    prompts, _ = eval_prompts(loaded.adapter, [fresh], cfg.pruner, budget, cfg.seed, cfg.efficiency.bench)
    t2 = _sync(device)
    prefill, decode = engine.time_stages(prompts, cfg.efficiency.decode_tokens)
    return [t1 - t0, t2 - t1, prefill, decode], fresh


def _time_ltopd(
    job: EvalJob, loaded: LoadedModel, request: Request, budget: float
) -> tuple[list[float], EncodedSample]:
    """Returns one ``ltopd`` request's stage seconds (``STAGES["ltopd"]``), from the processor's CPU tensors to
    the decoded text, and the sample it encoded."""
    cfg, adapter, device = job.cfg, loaded.adapter, loaded.adapter.model.device
    engine = engine_for(adapter, loaded.processor.tokenizer, cfg.engine)
    t0 = _sync(device)
    moved = {k: v.to(device) for k, v in request.batch.items() if k in VISUAL_INPUTS}
    t1 = _sync(device)
    fresh = encode_samples(adapter, loaded.processor, [request.prompt], BatchFeature({**request.batch, **moved}))[0]
    t2 = _sync(device)
    prompts, _ = eval_prompts(adapter, [fresh], cfg.pruner, budget, cfg.seed, cfg.efficiency.bench)
    t3 = _sync(device)
    prefill, decode, chosen = engine.time_replay(prompts, request.reference)
    t4 = time.perf_counter()  # time_replay ends synchronised
    loaded.processor.tokenizer.decode(chosen.tolist(), skip_special_tokens=True)
    t5 = time.perf_counter()
    return [t1 - t0, t2 - t1, t3 - t2, prefill, decode, t5 - t4], fresh


TIMERS = {"ltopd": _time_ltopd, "quick": _time_quick}


@torch.no_grad()
def measure_item(job: EvalJob, loaded: LoadedModel, request: Request, budget: float) -> dict[str, Any]:
    """Returns one item's timed repetitions per stage (ms; the protocol's stages), prefill length and kept
    tokens at ``budget``. With ``efficiency.count_flops`` also the prefill FLOPs counted by ``FlopCounterMode``.
    """
    cfg = job.cfg
    protocol = cfg.efficiency.protocol
    times: dict[str, list[float]] = {stage: [] for stage in STAGES[protocol]}
    for rep in range(cfg.efficiency.warmup + cfg.efficiency.repetitions):
        spans, fresh = TIMERS[protocol](job, loaded, request, budget)
        if rep >= cfg.efficiency.warmup:
            for stage, seconds in zip(STAGES[protocol], spans, strict=True):
                times[stage].append(1000.0 * seconds)
    # The counted context: the same choice, made first (an in-LLM one in its own pass over layers < K).
    selection = select_visual(loaded.adapter, [fresh], cfg.pruner, budget, cfg.seed, cfg.efficiency.bench)
    ctx = build_context(loaded.adapter, [fresh], selection)
    drop = ctx.inputs.late
    out = {
        "repetitions_ms": times,
        "prefill_len": int(ctx.inputs.embeds.shape[1]),
        "kept_visual": int(ctx.kept_visual.sum()),
        "late": None if drop is None else [drop.layer, int(drop.keep.sum())],
    }
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
    protocol: str,
) -> dict[str, Any]:
    """Returns one budget's averages over items: FLOPs by stage (``steps`` incremental decode forwards),
    KV-cache bytes, kept tokens, and each stage's latency by ``protocol``'s statistic (``summarize``; ``total``
    = their sum), with every item's timed repetitions (``repetitions_ms``: stage -> one list per item)."""
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
    }
    timed = {stage: [m["repetitions_ms"][stage] for m in measures] for stage in measures[0]["repetitions_ms"]}
    row["latency_ms"] = {stage: summarize(times, protocol) for stage, times in timed.items()}
    row["latency_ms"]["total"] = sum(row["latency_ms"].values())
    row["repetitions_ms"] = timed
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
    grids = [tuple(g) for key in ("video_grid_thw", "image_grid_thw") if key in batch for g in batch[key].tolist()]

    def encode() -> list[ImageTokens]:
        videos, images = encode_visual(loaded.adapter, on_device)
        return [*videos, *images]

    return encode, grids


def prepare_request(job: EvalJob, loaded: LoadedModel, item: Item) -> tuple[Request, list[tuple[int, int, int]]]:
    """Returns ``item`` prepared for timing (its prompt, CPU tensors, encoded sample, ``ltopd``'s reference)
    and its patch grids (t, h, w)."""
    cfg, eff = job.cfg, job.cfg.efficiency
    spec = cfg.bench[eff.bench]
    prompt = prompt_item(item, spec.layout.prompt, cfg.prompt, with_image=True, video=video_source(spec))
    batch = processor_inputs(loaded.processor, [prompt])
    sample = encode_samples(loaded.adapter, loaded.processor, [prompt], batch)[0]
    encode, grids = visual_encoder(loaded, batch)
    reference = None
    if eff.protocol == "ltopd":
        ids = reference_ids(loaded.processor.tokenizer, question_answer(item, spec), eff.decode_tokens)
        reference = torch.tensor(ids, dtype=torch.long)
    return Request(prompt, batch, sample, encode, reference), grids


def measure_budgets(job: EvalJob, loaded: LoadedModel, items: list[Item]) -> list[dict[str, Any]]:
    """Returns one row per budget, the unpruned 1.0 first, each with its ratios to 1.0 (``with_ratios``).

    Every budget is measured on the same items back to back, so each sees the same machine state; the
    benchmark script ``scripts/bench_efficiency.py`` calls this on random weights of the real sizes.
    """
    cfg, eff = job.cfg, job.cfg.efficiency
    check_vision_family(loaded.adapter.family)
    budgets = sorted(set(eff.budgets) | {1.0}, reverse=True)
    measures: dict[float, list[dict[str, Any]]] = {budget: [] for budget in budgets}
    if video_source(cfg.bench[eff.bench]) is not None:
        check_video_family(loaded.adapter.family, f"bench.{eff.bench}.video")
    grids = []
    for item in tqdm(items, desc=f"efficiency {cfg.pruner.name}", unit="item"):
        request, item_grids = prepare_request(job, loaded, item)
        grids.append(item_grids)
        for budget in budgets:
            measures[budget].append(measure_item(job, loaded, request, budget))
    forwards = decode_forwards(eff.protocol, eff.decode_tokens)
    rows = {b: budget_row(loaded, b, grids, measures[b], forwards, eff.protocol) for b in budgets}
    return [with_ratios(rows[b], rows[1.0]) for b in budgets]


def decode_forwards(protocol: str, decode_tokens: int) -> int:
    """Returns the incremental forwards after the prefill: ``ltopd`` replays ``decode_tokens`` tokens with one
    fewer (the prefill predicts the first); ``quick`` runs one engine step per token."""
    return decode_tokens - 1 if protocol == "ltopd" else decode_tokens


def timed_items(job: EvalJob, loaded: LoadedModel) -> tuple[list[Item], dict[str, Any]]:
    """Returns the items the protocol times (at most ``num_items``) and the record of how they were chosen:
    the rule, the threshold (``ltopd``), the candidates read, the items selected and their distinct images.

    Raises:
        ValueError: no item passes ``ltopd``'s rule.
    """
    cfg, eff = job.cfg, job.cfg.efficiency
    spec = cfg.bench[eff.bench]
    candidates = load_bench_items(spec, cfg.max_skip_fraction).items
    selected = candidates
    if eff.protocol == "ltopd":
        selected = select_questions(candidates, spec, loaded.processor.tokenizer, eff.min_answer_tokens)
        if not selected:
            raise ValueError(
                f"efficiency.protocol=ltopd: none of the {len(candidates)} items of {eff.bench} has a most frequent "
                f"answer of >= efficiency.min_answer_tokens={eff.min_answer_tokens} tokens; lower it, or pick "
                "another efficiency.bench"
            )
    items = selected[: eff.num_items]
    record = {
        "rule": SELECTION[eff.protocol],
        "min_answer_tokens": eff.min_answer_tokens if eff.protocol == "ltopd" else None,
        "candidates": len(candidates),
        "selected": len(selected),
        "selected_images": len({hashlib.sha256(i.image_bytes).hexdigest() for i in selected}),
        "measured": len(items),
    }
    return items, record


def run_efficiency(job: EvalJob) -> Path:
    """Returns the efficiency JSON after measuring every budget (and the unpruned model) on the same items."""
    cfg, eff = job.cfg, job.cfg.efficiency
    key, chash = job.key_hash(eff.bench)
    out = efficiency_path(cfg.results_root, cfg.experiment, cfg.model.name, cfg.method_name, cfg.pruner.name)
    if not cfg.force and finished(out, chash):
        log.info("efficiency: finished with config %s, skipping", chash)
        return out
    started = time.perf_counter()
    loaded, info = job.model()
    items, selection = timed_items(job, loaded)
    payload = {
        "model": info,
        "method": cfg.method_name,
        "pruner": cfg.pruner.name,
        "bench": eff.bench,
        "protocol": eff.protocol,
        "statistic": STATISTIC[eff.protocol],
        "selection": selection,
        "num_items": len(items),
        "repetitions": eff.repetitions,
        "warmup": eff.warmup,
        "decode_tokens": eff.decode_tokens,
        "decode_forwards": decode_forwards(eff.protocol, eff.decode_tokens),
        "decoding": "replayed reference" if eff.protocol == "ltopd" else "greedy",
        "reference_budget": 1.0,
        "budgets": measure_budgets(job, loaded, items),
        "provenance": provenance(job.resolved, key, cfg.model.device),
        "wall_time_s": time.perf_counter() - started,
    }
    write_json(out, payload)
    columns = ["budget", "prefill_flops_ratio", "kv_cache_ratio", "latency_ratio", "latency_ms"]
    table = [
        [
            r["budget"],
            r["ratios"]["prefill_flops"],
            r["ratios"]["kv_cache"],
            r["ratios"]["latency"]["total"],
            r["latency_ms"]["total"],
        ]
        for r in payload["budgets"]
    ]
    job.tracker().log_table("efficiency", columns, table)
    return out
