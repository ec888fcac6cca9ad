"""Evaluation's engine batch and queue (issue 44, item 2): ``batch_size: auto`` and ``queue_size: auto``, the one
memory rule that sizes them on a GPU, and the config errors for a batch or queue the memory cannot hold.

The arithmetic is tested on the CPU with an injected free-memory figure against a hand computation for Qwen2.5-VL-7B
from its published config.json (src/sparsectx/assets/published/Qwen2.5-VL-7B-Instruct: 28 layers, 4 KV heads of
128, hidden 3584, MLP 18944, vocabulary 152064; vision blocks of width 1280 with an MLP of 3420, merge 2). Off CUDA
the rule resolves to today's 8 slots and 64 items, and the recorded config and run key are today's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from sparsectx.eval import runner
from sparsectx.eval.config import load_eval_config
from sparsectx.eval.harness import compose_eval_config
from sparsectx.eval.slots_budget import record_slots, resolve_slots
from sparsectx.plan.architecture import architecture

from .test_runner_support import SIDE, base_overrides, build_model_dir, compose_eval, write_bench

QWEN_7B = "Qwen/Qwen2.5-VL-7B-Instruct"
RULE = [
    "model=qwen2_5_vl_7b",  # model.device=cuda, dtype bfloat16
    "bench=mmstar",
    "bench.mmstar.max_new_tokens=1024",
    "budget=1.0",  # full context: every slot's prompt holds all its visual tokens
    "model.max_visual_tokens=1024",
    "batch_auto.text_tokens=300",
    "batch_auto.queue_multiple=8",
    "batch_auto.free_fraction=0.9",
    "engine.graph_cache=2",
    "engine.length_step=256",
    "engine.prefill_tokens=32768",
]
"""Settings the hand computation below is written for (each stated, so a default changed elsewhere cannot move it)."""

# Hand computation, bytes. One token's keys and values: 28 layers x (K and V) x 4 heads x 128 x bf16.
KV_PER_TOKEN = 28 * 2 * 4 * 128 * 2  # 57,344
POSITIONS = 2560  # (300 + 1024 prompt) + 1024 new + 1 = 2349 positions, rounded up to engine.length_step 256
KEPT_SHAPES = 2  # engine.graph_cache: each captured (slots, length) graph keeps its slot cache
KV_PER_SLOT = KEPT_SHAPES * POSITIONS * KV_PER_TOKEN
QUEUED_PER_SLOT = 8 * 1024 * 3584 * 2  # queue_multiple items per slot, each 1024 encoded visual tokens of 3584, bf16
# A prefill forward holds at most engine.prefill_tokens padded tokens (from 25 slots of 1,324 tokens on), each with
# one decoder layer's widest moment (bf16 hidden x3, q, k and v, the MLP's three intermediates, the fp32 residual)
# and its keys and values in the prefill's own cache.
LAYER_WORKING = 2 * (3 * 3584 + 28 * 128 + 2 * 4 * 128 + 3 * 18944) + 4 * 3584  # 158,720
PREFILL = 32768 * (LAYER_WORKING + KV_PER_TOKEN)
# One vision block per patch (4 patches per merged token): its linear outputs (qkv 3840, proj 1280, gate and up
# 3420 each, down 1280) in bf16, two fp32 copies of the width and one bf16 output.
VISION_PER_SLOT = 1024 * 4 * (2 * (3840 + 1280 + 3420 + 3420 + 1280) + 2 * 4 * 1280 + 2 * 1280)
LOGITS_PER_SLOT = 152064 * 4  # fp32 next-token logits
OVERHEAD = 1.0e9  # conf/plan.yaml allocator_overhead_gb: cuBLAS workspaces and CUDA-graph pools


def _weights() -> float:
    """Returns the bf16 weights of Qwen2.5-VL-7B in bytes (its exact parameter count: 8.29B, docs/plan.md)."""
    total = architecture(QWEN_7B).total
    assert 8.28e9 < total < 8.30e9
    return 2.0 * total


def _need(slots: int, queued_per_slot: int = QUEUED_PER_SLOT) -> float:
    """Returns the hand-computed bytes of ``slots`` slots of the ``RULE`` settings (queue auto: 8 items a slot):
    the weights, the kept slot caches, the queued images and the largest of prefill, tower and logits."""
    phase = max(PREFILL, slots * VISION_PER_SLOT, slots * LOGITS_PER_SLOT)
    return _weights() + OVERHEAD + slots * (KV_PER_SLOT + queued_per_slot) + phase


def _config(extra: list[str] = ()):  # noqa: ANN202 - an EvalConfig
    return load_eval_config(compose_eval(["logger=none", *RULE, *extra]))


def test_defaults_are_auto_and_resolve_to_todays_8_and_64_off_cuda() -> None:
    """conf/evaluate.yaml's batch and queue are ``auto``; on the CPU they are 8 slots and 64 items, and the config
    recorded (and hashed into every result's run key) is the one an explicit ``batch_size=8 queue_size=64`` gave."""
    composed = compose_eval(["logger=none"])
    assert (composed.batch_size, composed.queue_size) == ("auto", "auto")
    cfg = load_eval_config(composed)
    choice = resolve_slots(cfg, None, None)
    assert (choice.batch_size, choice.queue_size) == (8, 64)
    recorded = OmegaConf.to_container(composed, resolve=True)
    record_slots(recorded, choice)
    explicit = OmegaConf.to_container(compose_eval(["logger=none", "batch_size=8", "queue_size=64"]), resolve=True)
    del explicit["batch_auto"]
    assert recorded == explicit


def test_auto_takes_the_largest_bucket_that_fits_by_hand_computation() -> None:
    """On a GPU, auto is the largest engine.slot_buckets entry whose call (weights, the kept slot caches, the queued
    images' features, the largest of prefill, tower and logits, allocator overhead) fits free x free_fraction."""
    cfg = _config()
    fits = resolve_slots(cfg, architecture(QWEN_7B), _need(128) / 0.9 + 1e6)
    short = resolve_slots(cfg, architecture(QWEN_7B), _need(128) / 0.9 - 1e6)
    assert (fits.batch_size, fits.queue_size) == (128, 1024)
    assert (short.batch_size, short.queue_size) == (64, 512)
    assert "batch_size=auto -> 128" in fits.reason
    few = [resolve_slots(cfg, architecture(QWEN_7B), _need(32) / 0.9 + d).batch_size for d in (1e6, -1e6)]
    assert few == [32, 16]  # where the bounded prefill, not the tower, is the largest phase
    assert f"KV cache {128 * KV_PER_SLOT / 1e9:.1f} GB" in fits.reason


def test_an_explicit_batch_the_memory_cannot_hold_names_the_key_and_what_fits() -> None:
    """``batch_size=256`` where 64 slots fit: a config error naming the key, its KV cache for slots of the hand-
    computed length, the largest batch that fits and the free memory, before anything is loaded."""
    cfg = _config(["batch_size=256"])
    free = _need(64) / 0.9 + 1e6
    with pytest.raises(ValueError) as caught:
        resolve_slots(cfg, architecture(QWEN_7B), free)
    message = str(caught.value)
    assert message.startswith("batch_size=256 needs")
    assert f"a {256 * KV_PER_SLOT / 1e9:.1f} GB KV cache for {POSITIONS:,}-position slots" in message
    assert f"64 fits in the {free / 1e9:.1f} GB free on cuda" in message
    assert "lower batch_size or set batch_size=auto" in message
    assert resolve_slots(_config(["batch_size=64"]), architecture(QWEN_7B), free).batch_size == 64


def test_an_explicit_queue_the_memory_cannot_hold_names_the_largest_multiple_that_fits() -> None:
    """A queue's items stay encoded on the GPU while the call decodes: ``queue_size`` beyond the memory is refused,
    naming the largest multiple of the batch that fits."""
    cfg = _config(["batch_size=64", "queue_size=65536"])
    free = _need(64) / 0.9 + 1e6  # fits 64 slots with their auto queue of 512
    item = 1024 * 3584 * 2
    room = free * 0.9 - (_need(64) - 64 * QUEUED_PER_SLOT)
    largest = int(room // (64 * item)) * 64
    with pytest.raises(ValueError, match=rf"^queue_size=65536 needs .* {largest} fits .* lower queue_size"):
        resolve_slots(cfg, architecture(QWEN_7B), free)
    assert resolve_slots(_config(["batch_size=64", f"queue_size={largest}"]), architecture(QWEN_7B), free)


def test_a_queue_not_a_multiple_of_the_batch_is_refused() -> None:
    """The queue is whole rounds of the slots (the issue: "the queue a multiple of the slots")."""
    with pytest.raises(ValueError, match=r"queue_size=60 is not a multiple of batch_size=8; set queue_size=64"):
        load_eval_config(compose_eval(["logger=none", "batch_size=8", "queue_size=60"]))
    with pytest.raises(ValueError, match=r"queue_size=4 < batch_size=8"):
        load_eval_config(compose_eval(["logger=none", "batch_size=8", "queue_size=4"]))
    with pytest.raises(ValueError, match=r"batch_size='many' must be a positive integer or auto"):
        load_eval_config(compose_eval(["logger=none", "batch_size=many"]))


def test_auto_batch_with_shards_on_a_gpu_is_refused_but_off_cuda_it_is_one_value() -> None:
    """Every shard and the merge must share one batch (it is in the results' key) and a merge measures no GPU, so
    auto on CUDA with shards is refused; off CUDA auto is a fixed number and shards may use it."""
    with pytest.raises(ValueError, match=r"batch_size=auto on model.device=cuda with shard.count=2"):
        load_eval_config(compose_eval(["logger=none", "model=qwen2_5_vl_7b", "shard.count=2"]))
    assert load_eval_config(compose_eval(["logger=none", "model=qwen2_5_vl_7b", "shard.count=2", "batch_size=64"]))
    assert load_eval_config(compose_eval(["logger=none", "shard.count=2"])).batch_size == "auto"


def test_every_reader_sees_the_resolved_ints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``runner.run`` resolves before the run key is hashed: the benchmark step gets 8 and 64, the record holds them
    (no ``batch_auto`` block), and the key equals that of an explicit 8 and 64; the harness config does too."""
    model = build_model_dir(tmp_path / "model", "qwen2_5_vl", weights=False)
    bench = write_bench(tmp_path / "syn_mcq.tsv", "syn_mcq", 2, SIDE)
    seen = []

    def step(job: runner.EvalJob, spec) -> Path:  # noqa: ANN001 - a BenchSpec
        seen.append((job.cfg.batch_size, job.cfg.queue_size, job.resolved, job.key_hash(spec.name)[1]))
        return tmp_path / "unused.json"

    monkeypatch.setattr(runner, "evaluate_benchmark", step)
    overrides = [*base_overrides(model, tmp_path / "results", {"syn_mcq": bench}, 8), "bench=syn_mcq"]
    runner.run(compose_eval(overrides))
    runner.run(compose_eval([*overrides, "batch_size=8", "queue_size=64"]))
    (batch, queue, resolved, key), (_, _, _, explicit_key) = seen
    assert (batch, queue, resolved["batch_size"], resolved["queue_size"]) == (8, 64, 8, 64)
    assert "batch_auto" not in resolved
    assert key == explicit_key
    harness = compose_eval_config(["bench=syn_mcq"])
    assert (harness.batch_size, harness.queue_size) == (8, 64)


def test_each_benchmark_is_sized_by_its_own_prompts_and_cap() -> None:
    """A suite's benchmarks share a process but not a batch: a video benchmark's 12,288-token clips get fewer slots
    than an image benchmark's 1,024-token images (each resolved for its own run key)."""
    cfg = load_eval_config(compose_eval(["logger=none", *RULE, "bench=[mmstar,videomme]"]))
    arch, free = architecture(QWEN_7B), 80e9
    image, video = (resolve_slots(cfg, arch, free, bench).batch_size for bench in ("mmstar", "videomme"))
    assert image == resolve_slots(_config(), arch, free).batch_size and video < image
    assert resolve_slots(cfg, arch, free).batch_size == video  # no benchmark named: the largest of them all
