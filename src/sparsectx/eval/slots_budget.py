"""Evaluation's engine batch and queue: what ``batch_size: auto`` and ``queue_size: auto`` resolve to, and the one
memory rule that sizes them on a GPU and refuses a batch or queue the memory cannot hold.

When: once per process and benchmark (the benchmark's prompts and cap size its slots), before the run key is hashed
and before the model is loaded (``runner.run``; ``harness.compose_eval_config`` once for all its benchmarks). The
resolved ints replace ``auto`` in the config every reader gets (the runner, Pass@K, the harness, the shard plan) and
in the recorded config (``record_slots``), so a result's ``batch_size``, ``provenance.config`` and run key name the
numbers that ran. Both sizes are in the run key (``results.run_key``): a later run whose ``auto`` resolves
differently (another GPU, less free memory) does not reuse the earlier results or predictions.

Off CUDA, and in ``mode=efficiency`` (which decodes one item at a time): ``batch_auto.cpu_batch_size`` slots, no
memory check (the tiny studies' 8 slots and 64 items).

On CUDA: the memory is the plan's formula (``sparsectx.plan.memory.evaluation_estimate``, the same function the plan
reads): the model's weights, the slot caches of the ``engine.graph_cache`` shapes the engine keeps (slots rounded up
to ``engine.slot_buckets``, length to ``engine.length_step``), the encoded images of the call's queue, the largest
of the prefill (``engine.prefill_tokens`` padded tokens per forward), the tower on a batch of images and the fp32
logits, and ``allocator_overhead_gb`` (conf/plan.yaml), all scaled from bf16 to ``model.dtype``. It is compared with
``batch_auto.free_fraction`` of the GPU's free memory (``torch.cuda.mem_get_info``), measured before this process
loads its weights. Slots are sized conservatively from the settings, not from the encoded prompts (the run key needs
the sizes before anything is encoded): ``batch_auto.text_tokens`` plus one image of ``model.max_visual_tokens``
(null: ``batch_auto.visual_tokens``; a video benchmark: its ``video.max_tokens``) kept at the budget (all of them at
budget 1.0, in Pass@K's full-context pass and for in-LLM pruners, whose prefill holds every token), plus the largest
``max_new_tokens`` of the chosen benchmarks, plus one position.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from sparsectx.budget import tokens_to_keep
from sparsectx.eval.checkpoints import weights_folder
from sparsectx.eval.config import AUTO, EvalConfig, check_queue, on_cuda
from sparsectx.models.loading import DTYPES, check_device
from sparsectx.paths import CONF_DIR
from sparsectx.plan.architecture import Architecture, architecture_of
from sparsectx.plan.memory import BF16, GB, EngineSizes, Estimate, cache_bytes, evaluation_estimate
from sparsectx.plan.shapes import EvalShape, kept_slot_caches

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SlotChoice:
    """The engine sizes one evaluation process runs with."""

    batch_size: int
    queue_size: int
    reason: str
    """How they were chosen (logged once): the rule, its memory figures, or that they were given."""


@dataclass(frozen=True)
class CallBound:
    """The largest engine call the settings allow, in tokens: what the memory rule sizes the slots for."""

    prompt_tokens: int
    """A slot's longest prompt as prefilled: text plus the visual tokens kept at the budget."""
    new_tokens: int
    """The largest generation cap of the chosen benchmarks (Pass@K: or its own cap)."""
    visual_tokens: int
    """An item's encoded visual tokens before pruning (what the queue holds and the tower runs on)."""


def call_bound(cfg: EvalConfig, bench: str | None = None) -> CallBound:
    """Returns the settings' bound on one engine call's prompts (module doc) of benchmark ``bench`` (None: of every
    chosen one). A prompt that with its cap needs more than ``engine.max_length`` positions is never decoded
    (``DecodeEngine.overlong``), so the bound stops there."""
    specs = list(cfg.bench.values()) if bench is None else [cfg.bench[bench]]
    images = cfg.model.max_visual_tokens or cfg.batch_auto.visual_tokens
    visual = max(spec.video.max_tokens if spec.video is not None else images for spec in specs)
    passk = cfg.mode == "passk"
    whole = cfg.budget == 1.0 or passk or cfg.pruner.stage == "llm"
    kept = visual if whole else tokens_to_keep(cfg.budget, visual)
    new = max(spec.max_new_tokens for spec in specs)
    if passk:
        new = max(new, cfg.passk.max_new_tokens)
    prompt = min(cfg.batch_auto.text_tokens + kept, max(1, cfg.engine.max_length - new - 1))
    return CallBound(prompt_tokens=prompt, new_tokens=new, visual_tokens=visual)


def allocator_overhead_gb() -> float:
    """Returns conf/plan.yaml's ``allocator_overhead_gb`` (cuBLAS workspaces and CUDA-graph pools): one constant for
    the plan and this rule."""
    return float(OmegaConf.load(Path(CONF_DIR) / "plan.yaml").allocator_overhead_gb)


class MemoryRule:
    """The bytes an evaluation process of ``cfg`` needs on a GPU at each (batch, queue), against its free memory."""

    def __init__(self, cfg: EvalConfig, arch: Architecture, free_bytes: float, bench: str | None) -> None:
        self.cfg, self.arch, self.free = cfg, arch, float(free_bytes)
        self.graphs = cfg.engine.graphs_on(torch.device("cuda"))
        """With CUDA graphs the engine rounds slots up to a bucket and lengths to a step; without, not at all."""
        steps = (tuple(cfg.engine.slot_buckets), cfg.engine.length_step) if self.graphs else ((), 1)
        self.sizes = EngineSizes(*steps)
        self.cached_shapes = kept_slot_caches(self.graphs, cfg.engine.graph_cache)
        self.bound = call_bound(cfg, bench)
        self.scale = DTYPES[cfg.model.dtype].itemsize / BF16  # the formula counts bf16 weights and activations
        self.overhead = allocator_overhead_gb()
        self.usable = self.free * cfg.batch_auto.free_fraction

    def estimate(self, batch: int, queue: int) -> Estimate:
        """Returns the plan's estimate (GB, bf16) of ``batch`` slots with ``queue`` items per call."""
        b = self.bound
        prefill = self.cfg.engine.prefill_tokens
        shape = EvalShape(batch, b.prompt_tokens, b.new_tokens, b.visual_tokens, 1, queue, prefill, self.cached_shapes)
        return evaluation_estimate(self.arch, shape, self.sizes, self.overhead)

    def need(self, batch: int, queue: int) -> float:
        """Returns the bytes ``batch`` slots with ``queue`` items per call need, in ``model.dtype``."""
        return self.estimate(batch, queue).peak_gb * GB * self.scale

    def fits(self, batch: int, queue: int) -> bool:
        """Returns whether that call fits the usable memory."""
        return self.need(batch, queue) <= self.usable

    @property
    def positions(self) -> int:
        """Returns a slot's cache positions (prompt + cap + 1, rounded up to the length step)."""
        return self.sizes.length(self.bound.prompt_tokens + self.bound.new_tokens + 1)

    def kv_bytes(self, batch: int) -> float:
        """Returns the bytes of the slot caches ``batch`` slots keep (every cached shape)."""
        b = self.bound
        one = cache_bytes(self.arch, self.sizes, batch, b.prompt_tokens + b.new_tokens + 1)
        return self.cached_shapes * one * self.scale

    def free_text(self) -> str:
        """Returns the free memory and the share of it the rule fills, for messages."""
        device = self.cfg.model.device
        share = f"batch_auto.free_fraction={self.cfg.batch_auto.free_fraction:g}"
        return f"{self.free / GB:.1f} GB free on {device} ({self.usable / GB:.1f} GB usable, {share})"

    def slots_text(self, batch: int, queue: int) -> str:
        """Returns what ``batch`` slots with ``queue`` items take: the total, then its KV cache and the rest."""
        need, kv = self.need(batch, queue), self.kv_bytes(batch)
        return (
            f"{need / GB:.1f} GB: a {kv / GB:.1f} GB KV cache for {self.positions:,}-position slots "
            f"({self.cached_shapes} kept shape(s), prompts of up to {self.bound.prompt_tokens:,} tokens from the "
            f"settings) plus {(need - kv) / GB:.1f} GB of weights, {queue} queued items' images, prefill or tower "
            "and overhead"
        )


def resolve_slots(
    cfg: EvalConfig, arch: Architecture | None = None, free_bytes: float | None = None, bench: str | None = None
) -> SlotChoice:
    """Returns the batch and queue ``cfg`` runs ``bench`` with (module doc): ``auto`` resolved, given ints checked.

    Args:
        cfg: the checked config (``batch_size`` / ``queue_size`` ints or ``auto``).
        arch: the model's sizes (``sparsectx.plan.architecture``); unused off CUDA and in ``mode=efficiency``.
        free_bytes: the GPU's free memory before the weights are loaded; likewise unused there. Without both,
            given sizes are taken unchecked (``auto`` on CUDA is then refused).
        bench: the benchmark whose prompts and cap size the slots; None: the largest of every chosen one.

    Raises:
        ValueError: a given batch or queue the memory cannot hold, naming the key and the largest that fits; no
            batch fitting at all; a queue that is not whole rounds of the batch.
    """
    multiple = cfg.batch_auto.queue_multiple
    if not measured(cfg) or arch is None or free_bytes is None:
        if measured(cfg) and cfg.batch_size == AUTO:
            raise ValueError(
                f"batch_size={AUTO} on model.device={cfg.model.device} is sized from the model and the GPU's free "
                "memory; pass both (resolve_for_device measures them)"
            )
        batch = cfg.batch_auto.cpu_batch_size if cfg.batch_size == AUTO else cfg.batch_size
        queue = multiple * batch if cfg.queue_size == AUTO else cfg.queue_size
        cfg.engine.check_slots(batch, "batch_size")
        check_queue(batch, queue)
        where = "mode=efficiency" if cfg.mode == "efficiency" else f"model.device={cfg.model.device}"
        return SlotChoice(batch, queue, f"{_sizes_text(cfg, batch, queue)} ({where}: no memory check)")
    rule = MemoryRule(cfg, arch, free_bytes, bench)
    given_queue = None if cfg.queue_size == AUTO else cfg.queue_size

    def queue_of(batch: int) -> int:
        return multiple * batch if given_queue is None else given_queue

    def least_queue(batch: int) -> int:  # a given queue is checked after the batch, on its own
        return queue_of(batch) if given_queue is None else batch

    candidates = [
        b
        for b in (cfg.engine.slot_buckets if rule.graphs else range(1, cfg.engine.max_slots + 1))
        if b <= cfg.engine.max_slots and (given_queue is None or given_queue % b == 0)
    ]
    if cfg.batch_size == AUTO:
        fitting = [b for b in candidates if rule.fits(b, queue_of(b))]
        if not fitting:
            least = min(candidates, default=1)
            raise ValueError(
                f"batch_size={AUTO}: not even {least} slot(s) fit: {rule.slots_text(least, queue_of(least))}, but "
                f"{rule.free_text()}; lower model.max_visual_tokens (or batch_auto.visual_tokens), the benchmarks' "
                "max_new_tokens or queue_size, or use a GPU with more free memory"
            )
        batch = max(fitting)
    else:
        batch = cfg.batch_size
        if not rule.fits(batch, least_queue(batch)):
            fitting = [b for b in candidates if rule.fits(b, least_queue(b))]
            largest = f"{max(fitting)} fits" if fitting else "no batch fits"
            raise ValueError(
                f"batch_size={batch} needs {rule.slots_text(batch, least_queue(batch))}; {largest} in the "
                f"{rule.free_text()} — lower batch_size or set batch_size={AUTO}"
            )
    queue = queue_of(batch)
    check_queue(batch, queue)
    if not rule.fits(batch, queue):
        raise ValueError(
            f"queue_size={queue} needs {rule.slots_text(batch, queue)}; {_largest_queue(rule, batch)} fits in the "
            f"{rule.free_text()} — lower queue_size or set queue_size={AUTO}"
        )
    memory = (
        f"KV cache {rule.kv_bytes(batch) / GB:.1f} GB of {rule.need(batch, queue) / GB:.1f} GB for "
        f"{rule.positions:,}-position slots, within the {rule.free_text()}"
    )
    return SlotChoice(batch, queue, f"{_sizes_text(cfg, batch, queue)}: {memory}")


def _largest_queue(rule: MemoryRule, batch: int) -> int:
    """Returns the largest multiple of ``batch`` items per call that fits beside ``batch`` slots (the need grows
    linearly with the queued items)."""
    bare = rule.need(batch, 0)
    per_round = rule.need(batch, batch) - bare
    return int((rule.usable - bare) // per_round) * batch


def _sizes_text(cfg: EvalConfig, batch: int, queue: int) -> str:
    """Returns ``batch_size=auto -> 8, queue_size=auto -> 64`` (or ``batch_size=8`` for a given size)."""
    parts = [(key, value, getattr(cfg, key)) for key, value in (("batch_size", batch), ("queue_size", queue))]
    return ", ".join(f"{key}={AUTO} -> {value}" if given == AUTO else f"{key}={value}" for key, value, given in parts)


def measured(cfg: EvalConfig) -> bool:
    """Returns whether ``cfg``'s sizes are checked against GPU memory: on CUDA, except in ``mode=efficiency``."""
    return on_cuda(cfg.model.device) and cfg.mode != "efficiency"


def device_memory(cfg: EvalConfig, generates: bool = True) -> tuple[Architecture | None, float | None]:
    """Returns the model's sizes and the GPU's free bytes now, before this process loads the weights, where
    ``cfg``'s sizes are measured; (None, None) elsewhere.

    The sizes come from the ``config.json`` of the folder the weights are read from (``weights_folder``), built on
    the meta device (``architecture_of``); the free memory from ``torch.cuda.mem_get_info``. ``batch_size=auto`` on
    CUDA is always measured; given sizes only where this process ``generates`` (a shard merge does not) and a GPU is
    at hand (without one, loading the model reports the device, and a finished run loads nothing).

    Raises:
        ValueError: ``auto`` on a CUDA device that is not at hand (``check_device``'s message).
    """
    if not measured(cfg) or not (cfg.batch_size == AUTO or (generates and torch.cuda.is_available())):
        return None, None
    check_device(cfg.model.device)
    weights = Path(weights_folder(cfg.model, cfg.checkpoint))
    config: dict[str, Any] = json.loads((weights / "config.json").read_text(encoding="utf-8"))
    free, _ = torch.cuda.mem_get_info(torch.device(cfg.model.device))
    return architecture_of(config, cfg.model.path), float(free)


def bench_slots(cfg: EvalConfig, generates: bool = True) -> dict[str, SlotChoice]:
    """Returns each chosen benchmark's sizes (``resolve_slots``, one measurement for all), logging each choice.

    Raises:
        ValueError: ``device_memory``'s or ``resolve_slots``' error, naming the benchmark.
    """
    arch, free = device_memory(cfg, generates)
    chosen = {}
    for name in cfg.bench:
        try:
            chosen[name] = resolve_slots(cfg, arch, free, name)
        except ValueError as err:
            raise ValueError(f"benchmark {name!r}: {err}") from err
        log.info("%s: %s", name, chosen[name].reason)
    return chosen


def resolve_for_device(cfg: EvalConfig) -> SlotChoice:
    """Returns the sizes for every chosen benchmark at once (``resolve_slots`` with ``bench=None``), measured on the
    config's device (``device_memory``): a harness's rows may come from any of them."""
    choice = resolve_slots(cfg, *device_memory(cfg))
    log.info("%s", choice.reason)
    return choice


def planned_slots(cfg: EvalConfig, arch: Architecture, usable_gb: float, bench: str) -> SlotChoice:
    """Returns the sizes an evaluation job of ``cfg`` resolves to for ``bench`` on a GPU with ``usable_gb`` free: the
    plan's (``gpu_mem_gb - unallocatable_gb``), by the same rule (``resolve_slots``)."""
    return resolve_slots(cfg, arch, usable_gb * GB, bench)


def record_slots(resolved: dict[str, Any], choice: SlotChoice) -> None:
    """Writes the chosen sizes into a recorded config (``resolved``, what results and the run key hold) in place of
    ``auto``, and drops the ``batch_auto`` block: the numbers that ran define the result, not how they were chosen
    (off CUDA the record is then the one an explicit ``batch_size=8 queue_size=64`` gives)."""
    resolved["batch_size"], resolved["queue_size"] = choice.batch_size, choice.queue_size
    resolved.pop("batch_auto", None)


def use_slots(cfg: EvalConfig, choice: SlotChoice) -> None:
    """Sets ``cfg``'s batch and queue to the chosen ints (what every reader of the config then sees)."""
    cfg.batch_size, cfg.queue_size = choice.batch_size, choice.queue_size
