"""Wall time of a job from the throughput figures measured on a GPU (conf/plan.yaml, each citing
docs/performance.md).

Training: steps x effective batch x s/sample / (processes x ``process_efficiency``), the measured s/sample scaled
by the job's tokens per prompt (rollouts x (prompt + max_new_tokens)) over the measured run's, times the fsdp
slowdown under ``distributed.strategy=fsdp``. Evaluation: items x output tokens / decode tokens/s at the engine's
batch (prefill is inside that figure) + the vision tower per image. An architecture without its own figure takes
the nearest measured one (same kind) scaled by parameter count; the returned note says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig

from sparsectx.plan.architecture import Architecture
from sparsectx.plan.shapes import EvalShape, TrainShape


@dataclass(frozen=True)
class Timing:
    """Planned minutes of a job and how its figure was chosen."""

    minutes: float
    note: str


def train_minutes(
    plan: DictConfig, model: str, arch: Architecture, s: TrainShape, archs: dict[str, Architecture]
) -> Timing:
    """Returns the planned wall time of a training job of shape ``s`` (one of its processes) on ``model``."""
    kind = "lora" if s.lora_rank is not None else "full"
    source, figure = _figure(plan, model, kind)
    scale = 1.0 if source == model else archs[source].total and arch.total / archs[source].total
    note = "" if source == model else f"s/sample scaled from {source} ({kind}) by parameter count x{scale:.2f}"
    per_prompt = s.micro_sequences // max(1, s.images)
    tokens = per_prompt * (s.student_tokens + s.new_tokens)
    measured = figure.sequences * (figure.prompt_tokens + figure.new_tokens)
    per_sample = figure.s_per_sample * scale * tokens / measured
    if s.fsdp:
        per_sample *= plan.fsdp_slowdown.factor
    efficiency = 1.0 if s.processes == 1 else plan.process_efficiency
    seconds = s.steps * s.effective_batch * per_sample / (s.processes * efficiency)
    return Timing(plan.startup_minutes.train + seconds / 60, note)


def _figure(plan: DictConfig, model: str, kind: str) -> tuple[str, DictConfig]:
    """Returns (model measured, its figure) of ``kind``: ``model``'s own, else the first model measured for it."""
    figures = plan.train_figures
    if model in figures and kind in figures[model]:
        return model, figures[model][kind]
    source = next(name for name, kinds in figures.items() if kind in kinds)
    return source, figures[source][kind]


def decode_tokens_per_s(plan: DictConfig, model: str, arch: Architecture, reference: Architecture, slots: int) -> float:
    """Returns the engine's tokens/s for ``model`` at ``slots`` slots: the reference's figure at the nearest
    measured batch not above ``slots``, scaled by the batch-1 decode time (or else the parameter count)."""
    rows = sorted(plan.decode_figures, key=lambda r: r.batch)
    row = next((r for r in reversed(rows) if r.batch <= slots), rows[0])
    figures = plan.efficiency_figures
    if model in figures:
        speed = figures[plan.decode_reference].decode_ms / figures[model].decode_ms
    else:
        speed = reference.total / arch.total
    return row.tokens_per_s * speed


def eval_minutes(
    plan: DictConfig, stage: str, items: int, s: EvalShape, draws: int, tokens_per_s: float, vision_scale: float
) -> float:
    """Returns the planned minutes of an evaluation job: ``items`` prompts, ``draws`` sampled outputs of up to
    ``s.new_tokens`` each, shared over ``s.processes`` GPUs, plus each image's pass through the tower."""
    vision_s = items * plan.vision_ms_per_image.value / 1000 * vision_scale * s.visual_tokens / plan.visual_tokens
    decode_s = items * draws * s.new_tokens / tokens_per_s
    return plan.startup_minutes[stage] + (vision_s + decode_s) / s.processes / 60


def efficiency_minutes(
    plan: DictConfig, model: str, arch: Architecture, reference: Architecture, requests: int
) -> Timing:
    """Returns the planned minutes of an efficiency job: ``requests`` timed batch-1 requests of the measured
    unpruned cost (the reference architecture's scaled by parameter count when ``model`` has none)."""
    figures = plan.efficiency_figures
    if model in figures:
        per_request, note = figures[model].total_ms, ""
    else:
        scale = arch.total / reference.total
        per_request = figures[plan.decode_reference].total_ms * scale
        note = f"request time scaled from {plan.decode_reference} by parameter count x{scale:.2f}"
    return Timing(plan.startup_minutes.efficiency + requests * per_request / 1000 / 60, note)
