"""What a job's memory and time depend on, read from its composed config (``TrainShape``, ``EvalShape``).

A training job's shape comes from the checked ``TrainConfig`` that ``src/train.py`` would build
(``load_train_config``) and the number of processes it is launched with; an evaluation job's from the composed
``evaluate.yaml``. Lengths: a prompt is ``text_tokens`` plus each image's visual tokens (``model.max_visual_tokens``
when the run caps them, else conf/plan.yaml's ``visual_tokens``) kept at the schedule's largest budget; the
response is the ``max_new_tokens`` cap (an upper bound: rollouts and reference prefixes stop there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig

if TYPE_CHECKING:  # an annotation only: evaluation's memory rule imports this module without the trainer's config
    from sparsectx.training.config import TrainConfig


@dataclass(frozen=True)
class TrainShape:
    """One training process's settings that set its memory and time."""

    processes: int
    fsdp: bool
    lora_rank: int | None
    """LoRA rank, or None for full-parameter training."""
    lora_targets: tuple[str, ...]
    train_vision: bool
    teacher: str
    """``method.teacher.kind`` (``none`` for SFT and RL without a KL term)."""
    teacher_offload: bool
    checkpointing: bool
    int8_states: bool
    twin: bool
    """A merged/cast copy of the trained weights decodes rollouts or runs the teacher (``decode_copy.uses_copy``)."""
    objective: str
    rollouts: bool
    """Prefixes are decoded by the engine (``method.prefix=rollout``)."""
    micro_sequences: int
    """Sequences in one forward/backward: ``micro_batch_size`` x rollouts per prompt (or the RL group)."""
    step_sequences: int
    """Sequences this process decodes at once (``rollout_batch_size``, null: its whole step)."""
    student_tokens: int
    teacher_tokens: int
    probe_tokens: int | None
    new_tokens: int
    images: int
    """Images per micro-batch (one per prompt)."""
    visual_tokens: int
    """Merged visual tokens per full image."""
    steps: int
    effective_batch: int
    """Prompts per optimizer step over all processes."""


@dataclass(frozen=True)
class EvalShape:
    """One evaluation process's settings that set its memory and time."""

    slots: int
    """Sequences the decode engine holds at once (``batch_size``; Pass@K: ``passk.sample_batch``)."""
    prompt_tokens: int
    new_tokens: int
    visual_tokens: int
    processes: int
    queued: int
    """Items of one engine call, encoded before it decodes (``queue_size``)."""
    prefill_tokens: int
    """Most padded prompt tokens per prefill forward (``engine.prefill_tokens``)."""
    cached_shapes: int
    """Slot caches held at once (``kept_slot_caches``)."""


def kept_slot_caches(graphs: bool, graph_cache: int) -> int:
    """Returns how many slot caches an evaluation process holds at once: with CUDA graphs the engine keeps the last
    ``engine.graph_cache`` captured (slots, length) steps, each with its own cache (``DecodeEngine.step_for``), and
    the calls of a benchmark differ in length; without graphs, the one of the running call."""
    return graph_cache if graphs else 1


def prompt_lengths(text: int, visual: int, budget: float, delta: float | None) -> tuple[int, int, int | None]:
    """Returns (student, teacher, probe) prompt tokens: text plus the visual tokens kept at ``budget``, at 1.0,
    and (a b+δ probe) the union of the two selections at most (``probe_nesting: union``)."""
    kept = max(1, round(budget * visual))
    probe = None if delta is None else text + min(visual, kept + max(1, round((budget + delta) * visual)))
    return text + kept, text + visual, probe


def train_shape(tc: TrainConfig, processes: int, visual_default: int, text_tokens: int) -> TrainShape:
    """Returns the shape of one of ``processes`` processes running ``tc``; raises ValueError (naming the setting)
    when the run cannot launch with that many processes (``TrainConfig.accumulation``, the loop's own check)."""
    accum = tc.accumulation(processes)
    method = tc.method
    per_prompt = method.rl.group_size if method.rl is not None else method.rollouts_per_prompt
    visual = tc.model.max_visual_tokens or visual_default
    delta = method.positions.delta if method.positions.needs_probe else None
    student, teacher, probe = prompt_lengths(text_tokens, visual, method.schedule.max_budget(), delta)
    step_prompts = tc.micro_batch_size * accum
    decoded = (tc.rollout_batch_size or step_prompts * per_prompt) if method.prefix == "rollout" else 0
    fsdp = tc.distributed.strategy == "fsdp"
    lora = method.lora.enabled
    twin = "copy" in (tc.rollout_weights, tc.teacher_weights) or (tc.rollout_weights == "auto" and lora and not fsdp)
    uses_teacher = method.teacher.kind != "none" and (method.objective != "rl" or method.rl.beta > 0)
    return TrainShape(
        processes=processes,
        fsdp=fsdp,
        lora_rank=method.lora.r if lora else None,
        lora_targets=tuple(method.lora.target_modules),
        train_vision=method.train_vision,
        teacher=method.teacher.kind if uses_teacher else "none",
        teacher_offload=tc.memory.teacher_offload,
        checkpointing=tc.memory.activation_checkpointing,
        int8_states=tc.memory.optimizer_states == "int8",
        twin=twin,
        objective=method.objective,
        rollouts=method.prefix == "rollout",
        micro_sequences=tc.micro_batch_size * per_prompt,
        step_sequences=decoded,
        student_tokens=student,
        teacher_tokens=teacher,
        probe_tokens=probe,
        new_tokens=tc.max_new_tokens,
        images=tc.micro_batch_size,
        visual_tokens=visual,
        steps=tc.steps,
        effective_batch=method.effective_batch_size,
    )


def eval_shape(
    cfg: DictConfig, bench: dict[str, Any], processes: int, visual_default: int, text: int, sizes: tuple[int, int]
) -> EvalShape:
    """Returns the shape of one evaluation process of the composed ``evaluate.yaml`` on one benchmark's config
    (full context: the unpruned prompt bounds every budget's), with its engine's ``sizes``: (batch_size,
    queue_size) as ints (``auto`` resolved, ``sparsectx.eval.slots_budget``). A video benchmark's prompt holds its
    ``video.max_tokens`` visual tokens (the cap over all its frames). On a GPU: CUDA graphs unless turned off."""
    passk = cfg.mode == "passk"
    video = bench.get("video") or {}
    visual = video.get("max_tokens") or cfg.model.max_visual_tokens or visual_default
    new = cfg.passk.max_new_tokens if passk else bench["max_new_tokens"]
    batch, queue = sizes
    return EvalShape(
        slots=cfg.passk.sample_batch if passk else batch,
        prompt_tokens=text + visual,
        new_tokens=new,
        visual_tokens=visual,
        processes=processes,
        queued=queue,
        prefill_tokens=cfg.engine.prefill_tokens,
        cached_shapes=kept_slot_caches(cfg.engine.cuda_graphs != "off", cfg.engine.graph_cache),
    )
