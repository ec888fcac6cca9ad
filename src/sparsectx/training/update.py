"""One optimizer step: every micro-batch's forward/backward, then the gradient sync, clip, update and EMA.

Loss scaling (gradient accumulation and multiple processes). The step loss is
``L = Σ_{processes} Σ_{micro-batches} ℓ_j`` where each ``ℓ_j`` is divided by a count taken over the WHOLE
step: ``StepCounts`` sums the planned positions (or sequences) of every micro-batch on every process before
any backward. Each process backpropagates its own ``ℓ_j`` unscaled, accumulating over its micro-batches, and
the last micro-batch's backward SUMS the gradients of the trainable tensors over processes: DDP's reducer
all-reduces them (op SUM) in buckets as backward produces them, overlapping the rest of backward
(``sparsectx.training.replication``; the model is not wrapped in DDP, whose forward the adapter never calls).
The result is exactly ∇L: no division by the number of micro-batches or processes appears anywhere, so
1×4 == 4×1 == 2 processes × 2 (tested for accumulation), element for element the per-tensor sum DDP replaced.
Accelerate provides the process group, device placement and reductions.
Under ``distributed.strategy=fsdp`` the sharded tensors' gradients are summed by FSDP2's reduce-scatter in
each backward instead (divide factor 1, ``sparsectx.training.sharding``), the replicated ones (a trained vision
tower) by one all-reduce per tensor after backward, and the clip norm is taken over the shards: the same ∇L
(tested against one process).
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from accelerate import Accelerator

from sparsectx.layer_selection import LayerSelection
from sparsectx.seeding import derive_seed
from sparsectx.training.batches import TrainingSet
from sparsectx.training.config import TrainConfig
from sparsectx.training.contexts import MicroBatch, prepare_step
from sparsectx.training.groups import Draw, prepare_groups, reused_groups, stored_rollouts
from sparsectx.training.memory import offloaded_teacher_logits
from sparsectx.training.prefetch import Batch, HostInputs, HostPrefetch
from sparsectx.training.replication import GradientSync
from sparsectx.training.rl import rl_metrics
from sparsectx.training.schedules import BUDGET_SCHEDULES, LAYER_SCHEDULES, epic_teacher_budget
from sparsectx.training.sharding import clip_gradients, gathered, is_sharded, sum_replicated_gradients
from sparsectx.training.steps import NonFiniteLossError, StepCounts, micro_loss
from sparsectx.training.student import Student, mode
from sparsectx.training.token_trace import TokenTrace


class LRFactor:
    """The LR multiplier at a scheduler step: linear warm-up, then constant or cosine to 0 (picklable)."""

    def __init__(self, warmup_steps: int, total_steps: int, kind: str) -> None:
        self.warmup_steps, self.total_steps, self.kind = warmup_steps, total_steps, kind

    def __call__(self, step: int) -> float:
        """Returns the factor on the peak LR for optimizer step ``step`` (from 0)."""
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        if self.kind == "constant":
            return 1.0
        span = max(1, self.total_steps - self.warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, (step - self.warmup_steps) / span)))


def adamw_class(states: str) -> type[torch.optim.Optimizer]:
    """Returns the AdamW class for ``memory.optimizer_states``: torch's (fp32) or torchao's ``AdamW8bit``."""
    if states == "fp32":
        return torch.optim.AdamW
    from torchao.optim import AdamW8bit  # imported only for int8: torchao is slow to import

    return AdamW8bit


def build_optimizer(
    cfg: TrainConfig, student: Student
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """Returns AdamW over the trainable tensors (no weight decay below 2 dims) and its LR schedule.

    ``memory.optimizer_states=int8`` takes torchao's ``AdamW8bit``: the same update with block-wise 8-bit
    moments (a tensor under 4096 values, or not a multiple of 256, keeps fp32 ones). Its step is
    ``torch.compile``d per tensor shape (on CPU that needs a C++ compiler; a process's first step compiles).
    Its learning rate is a tensor, which ``LambdaLR`` fills in place, and its state (8-bit tensor subclasses)
    saves and loads through ``state_dict`` like AdamW's.
    """
    optim = cfg.method.optim
    params = list(student.trainable.values())
    groups = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": optim.weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    adamw = adamw_class(cfg.memory.optimizer_states)
    optimizer = adamw([g for g in groups if g["params"]], lr=optim.lr, betas=tuple(optim.betas), eps=optim.eps)
    factor = LRFactor(optim.warmup_steps, cfg.steps, optim.lr_schedule)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


@dataclass
class Trainer:
    """The live run: config, model, optimizer and counters (what ``state/`` saves).

    Attributes:
        step: optimizer steps done.
        samples_seen: training samples (prompts) consumed over all processes (the data position), however many
            rollouts each gets (``method.rollouts_per_prompt``). It advances on the steps that take new prompts
            only: under ``method.rl.num_iterations`` = μ > 1 a reuse step trains
            on the rollouts of the last generation step and consumes no item, so a run of ``steps`` steps
            sees ceil(steps / μ) · ``effective_batch_size`` samples (TRL repeats each prompt batch μ times
            instead; the prompts trained on are the same).
        wandb_id: the W&B run id, None without tracking.
        rollouts: the last generation step's rollouts while steps still reuse them (μ > 1; saved in
            ``state/``): ``{"step", "budget", "micro": groups.stored_rollouts(...)}`` of this process, else None.
    """

    cfg: TrainConfig
    accelerator: Accelerator
    student: Student
    data: TrainingSet
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    accum: int
    step: int
    samples_seen: int
    wandb_id: str | None
    prefetch: HostPrefetch = field(default_factory=HostPrefetch)
    """Builds the next step's host inputs while this one runs (``prefetch_host_inputs``)."""
    rollouts: dict[str, Any] | None = None
    trace: TokenTrace | None = None
    """The current step's per-token collector when it is traced (``token_trace``; never saved), else None."""
    gradient_sync: GradientSync | None = None
    """DDP's gradient sum over processes without sharding (``replicated_sync`` builds it at the first step), or
    None before that, on one process and under fsdp."""

    def generator(self, stream: str, micro: int, device: torch.device | str) -> torch.Generator:
        """Returns a generator seeded by (seed, stream, step, process, micro-batch) on ``device``."""
        seed = derive_seed(self.cfg.seed, stream, self.step, self.accelerator.process_index, micro)
        return torch.Generator(device=device).manual_seed(seed)


def rollout_iterations(cfg: TrainConfig) -> int:
    """Returns μ, the optimizer steps per batch of rollouts: ``method.rl.num_iterations``, else 1."""
    return cfg.method.rl.num_iterations if cfg.method.rl is not None else 1


def generates(trainer: Trainer) -> bool:
    """Returns whether the current step takes new prompts (every step unless rollouts are reused)."""
    return trainer.step % rollout_iterations(trainer.cfg) == 0


def step_budget(trainer: Trainer) -> float:
    """Returns the student's budget at the current step from ``method.schedule``."""
    schedule = trainer.cfg.method.schedule
    generator = torch.Generator().manual_seed(derive_seed(trainer.cfg.seed, "schedule", trainer.step))
    fn = BUDGET_SCHEDULES.get(schedule.name)
    return float(fn(trainer.step, total_steps=trainer.cfg.steps, generator=generator, **schedule.kwargs()))


def step_teacher_budget(trainer: Trainer, budget: float) -> float | None:
    """Returns the teacher's own budget min(1, b + gap(p)) this step (``method.teacher.budget_gap``), or None
    when the teacher keeps every visual token."""
    gap = trainer.cfg.method.teacher.budget_gap
    if gap is None:
        return None
    return epic_teacher_budget(
        budget,
        step=trainer.step,
        total_steps=trainer.cfg.steps,
        gap_start=gap.start,
        gap_slope=gap.slope,
        gap_max=gap.max,
    )


def step_layer(trainer: Trainer) -> int | None:
    """Returns this step's in-LLM pruning layer K from ``method.layer_schedule`` (EPIC's LCD: from the LLM's
    depth L, nothing dropped, to ``pruner.layer``), or None when every step prunes at ``pruner.layer``."""
    name = trainer.cfg.method.layer_schedule
    if name is None:
        return None
    depth = trainer.student.model.config.get_text_config().num_hidden_layers
    return LAYER_SCHEDULES.get(name)(
        trainer.step, total_steps=trainer.cfg.steps, num_layers=depth, final_layer=trainer.cfg.pruner.layer
    )


def layer_sums(micro: list[MicroBatch], depth: int) -> dict[str, float]:
    """Returns the step's summed in-LLM pruning layer over its student sequences with an image, and their count:
    a ``LayerSelection``'s K, or ``depth`` (L) for a context that keeps every token (LCD's first steps)."""
    layers = [
        sel[0].layer if isinstance(sel[0], LayerSelection) else depth for mb in micro for sel in mb.selections if sel
    ]
    return {"layer_sum": float(sum(layers)), "layer_sequences": float(len(layers))}


def micro_positions(trainer: Trainer, micro: int, samples_seen: int | None = None) -> list[int]:
    """Returns the global sample positions of micro-batch ``micro`` on this process for the step that starts
    at ``samples_seen`` (default: the current step)."""
    size, world = trainer.cfg.micro_batch_size, trainer.accelerator.num_processes
    seen = trainer.samples_seen if samples_seen is None else samples_seen
    start = seen + (micro * world + trainer.accelerator.process_index) * size
    return list(range(start, start + size))


def step_batches(trainer: Trainer, samples_seen: int | None = None) -> list[Batch]:
    """Returns this process's micro-batches (items, positions) of the step that starts at ``samples_seen``."""
    batches = []
    for j in range(trainer.accum):
        positions = micro_positions(trainer, j, samples_seen)
        batches.append(([trainer.data.item_at(p) for p in positions], positions))
    return batches


def step_host_inputs(trainer: Trainer) -> tuple[list[Batch], list[HostInputs]]:
    """Returns the current step's micro-batches and host inputs, and queues those of the next step that takes
    new prompts on the thread (μ steps on under ``method.rl.num_iterations``; reuse steps take nothing)."""
    cfg, processor = trainer.cfg, trainer.student.processor
    batches = step_batches(trainer)
    hosts = [trainer.prefetch.take(cfg, processor, batch) for batch in batches]
    if cfg.prefetch_host_inputs and trainer.step + rollout_iterations(cfg) < cfg.steps:
        following = step_batches(trainer, trainer.samples_seen + cfg.method.effective_batch_size)
        trainer.prefetch.submit(cfg, processor, following, pin=trainer.student.model.device.type == "cuda")
    return batches, hosts


def step_counts(micro: list[MicroBatch], accelerator: Accelerator) -> StepCounts:
    """Returns the step's normalisers: planned sequences and positions over all micro-batches and ranks."""
    device = accelerator.device
    local = torch.tensor(
        [sum(int((m.planned > 0).sum()) for m in micro), sum(int(m.planned.sum()) for m in micro)],
        device=device,
    )
    total = accelerator.reduce(local, reduction="sum") if accelerator.num_processes > 1 else local
    return StepCounts(sequences=int(total[0]), tokens=int(total[1]))


def replicated_sync(trainer: Trainer) -> GradientSync | None:
    """Returns the trainer's DDP gradient sum when several processes hold the whole model (built on first use,
    once the trainable tensors are final: after sharding and resume), else None (one process, or fsdp)."""
    if trainer.accelerator.num_processes == 1 or is_sharded(trainer.student):
        return None
    if trainer.gradient_sync is None:
        trainer.gradient_sync = GradientSync(trainer.student.trainable)
    return trainer.gradient_sync


def accumulate_gradients(trainer: Trainer) -> tuple[dict[str, float], list[MicroBatch], float]:
    """Returns (summed statistics, micro-batches, budget) after backpropagating every micro-batch of the step
    (``micro_loss`` fills ``Trainer.trace`` on a traced step).

    Raises:
        NonFiniteLossError: a micro-batch loss is NaN/inf (nothing has been updated yet).
    """
    cfg, student = trainer.cfg, trainer.student
    device = trainer.accelerator.device
    reuse = not generates(trainer)
    with gathered(student.model):  # fsdp: whole for the no-grad phase (decode loops differ per process)
        budget, micro = reused_step(trainer) if reuse else fresh_step(trainer)
    counts = step_counts(micro, trainer.accelerator)
    stored: list[torch.Tensor | None] = [None] * len(micro)
    if cfg.memory.teacher_offload:  # the teacher phase: every micro-batch's teacher logits before any student
        stored = list(offloaded_teacher_logits(student, cfg.method.teacher.kind, micro))
    totals: dict[str, float] = {}
    problems = []
    sync = replicated_sync(trainer)
    for j, (mb, teacher) in enumerate(zip(micro, stored, strict=True)):
        generator = trainer.generator("positions", j, device)
        synced = j == len(micro) - 1  # the step's last backward sums the gradients over processes
        with nullcontext() if sync is None else sync.loss_pass(synced):
            loss, stats = micro_loss(cfg, student, mb, counts, generator, stored_teacher=teacher, trace=trainer.trace)
        finite = bool(torch.isfinite(loss))
        if not finite:  # no backward: the gradients stay finite, the update will not happen
            problems.append(
                f"step {trainer.step}, micro-batch {j}: loss={float(loss.detach())} is not finite "
                f"(budget {budget:.4f}, samples {[it.index for it in mb.items]}, prefix lengths "
                f"{mb.valid.sum(-1).tolist()}, normalisers {counts})"
            )
        if is_sharded(student) or (sync is not None and synced):  # a backward that communicates: every process
            check_finite(trainer, problems)  # runs it, or none does
        if not finite:
            continue
        with mode(student.model, training=True):  # a checkpointed layer recomputes in backward in this mode
            trainer.accelerator.backward(loss)
        for key, value in stats.items():
            totals[key] = totals.get(key, 0.0) + value
    check_finite(trainer, problems)
    if cfg.method.layer_schedule is not None:  # the layer the contexts were built at (train/prune_layer)
        totals.update(layer_sums(micro, student.model.config.get_text_config().num_hidden_layers))
    if not reuse and rollout_iterations(cfg) > 1:  # old_logp is set now: micro_loss ran on every micro-batch
        trainer.rollouts = {"step": trainer.step, "budget": budget, "micro": stored_rollouts(micro)}
    return totals, micro, budget


def fresh_step(trainer: Trainer) -> tuple[float, list[MicroBatch]]:
    """Returns (budget, micro-batches) of a step that takes new prompts: contexts, then rollouts or groups."""
    cfg, student = trainer.cfg, trainer.student
    budget = step_budget(trainer)
    batches, hosts = step_host_inputs(trainer)
    rollout_generator = trainer.generator("rollout", 0, trainer.accelerator.device)
    if cfg.method.objective == "rl":
        draw = refill_draw(trainer)
        return budget, prepare_groups(cfg, student, batches, budget, rollout_generator, hosts, draw)
    teacher_budget = step_teacher_budget(trainer, budget)
    layer = step_layer(trainer)
    return budget, prepare_step(cfg, student, batches, budget, rollout_generator, hosts, teacher_budget, layer)


def reused_step(trainer: Trainer) -> tuple[float, list[MicroBatch]]:
    """Returns (budget, micro-batches) of a step that reuses the last generation step's rollouts.

    Raises:
        RuntimeError: those rollouts are not kept (a resume state written without them).
    """
    rollouts, origin = trainer.rollouts, trainer.step - trainer.step % rollout_iterations(trainer.cfg)
    if rollouts is None or rollouts["step"] != origin:
        raise RuntimeError(
            f"step {trainer.step} reuses the rollouts of step {origin} (method.rl.num_iterations) but they "
            f"are not kept (kept: {None if rollouts is None else rollouts['step']})"
        )
    micro = reused_groups(trainer.cfg, trainer.student, rollouts["micro"], rollouts["budget"], trainer.data.item_at)
    return rollouts["budget"], micro


def refill_draw(trainer: Trainer) -> Draw:
    """Returns dynamic sampling's prompt source: uniform draws from the training set, seeded per (step,
    process, round). Refill prompts do not advance ``samples_seen`` (the data position stays a function of
    the step); a drawn position p names the item at position p of the first epoch."""

    def draw(count: int, round_: int) -> Batch:
        rank = trainer.accelerator.process_index
        seed = derive_seed(trainer.cfg.seed, "refill", trainer.step, rank, round_)
        size = len(trainer.data.items)
        positions = torch.randint(size, (count,), generator=torch.Generator().manual_seed(seed)).tolist()
        return [trainer.data.item_at(p) for p in positions], positions

    return draw


def check_finite(trainer: Trainer, problems: list[str]) -> None:
    """Raises NonFiniteLossError on every process when any process saw a non-finite loss (none hangs)."""
    flag = torch.tensor([float(len(problems))], device=trainer.accelerator.device)
    if trainer.accelerator.num_processes > 1:
        flag = trainer.accelerator.reduce(flag, reduction="sum")
    if float(flag) > 0:
        where = "; ".join(problems) or "another process"
        raise NonFiniteLossError(
            f"{where} gave a non-finite loss; the run stops, keeping the last good state/ and checkpoint/"
        )


def sync_gradients(trainer: Trainer) -> None:
    """Returns None once the trainable tensors' gradients are summed over processes (a no-op on one process).

    Without sharding DDP summed them in the step's last backward (``replicated_sync``): this checks that every
    one was. Under fsdp the sharded tensors' gradients were summed in each backward; the replicated ones are
    summed here.
    """
    sync = replicated_sync(trainer)
    if sync is not None:
        sync.check_synced()
    elif trainer.accelerator.num_processes > 1:
        sum_replicated_gradients(list(trainer.student.trainable.values()))


def apply_update(trainer: Trainer) -> float:
    """Returns the pre-clip gradient norm after sync, clip, optimizer and LR steps, and the EMA update.

    Raises:
        NonFiniteLossError: the gradient norm is NaN/inf (the weights are left untouched).
    """
    sync_gradients(trainer)
    params = list(trainer.student.trainable.values())
    max_norm = trainer.cfg.method.optim.max_grad_norm
    if is_sharded(trainer.student):
        norm = clip_gradients(params, max_norm)
    else:
        norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    if not math.isfinite(norm):
        raise NonFiniteLossError(
            f"step {trainer.step}: gradient norm {norm} is not finite; the run stops, keeping the last good "
            "state/ and checkpoint/"
        )
    trainer.optimizer.step()
    trainer.scheduler.step()
    # DDP's gradients are views into its buckets: zeroed in place they stay views (no second copy next step)
    trainer.optimizer.zero_grad(set_to_none=trainer.gradient_sync is None)
    if trainer.student.ema is not None:  # after optimizer.step(), never before (spec §1.8)
        trainer.student.ema.update(trainer.student.trainable)
    return norm


def reduce_stats(trainer: Trainer, totals: dict[str, float]) -> dict[str, float]:
    """Returns ``totals`` summed over processes (the same keys on every process)."""
    if trainer.accelerator.num_processes == 1:
        return totals
    keys = sorted(totals)
    values = torch.tensor([totals[k] for k in keys], dtype=torch.float64, device=trainer.accelerator.device)
    summed = trainer.accelerator.reduce(values, reduction="sum")
    return dict(zip(keys, summed.tolist(), strict=True))


def step_metrics(totals: dict[str, Any], budget: float, lr: float, grad_norm: float) -> dict[str, float]:
    """Returns the per-step metrics logged to the tracker (means from the summed statistics)."""
    seqs = max(totals["sequences"], 1.0)
    metrics = {
        "train/loss": totals["loss"],
        "train/divergence": totals["divergence_sum"] / max(totals["selected"], 1.0),
        "train/selected_fraction": totals["selected"] / max(totals["valid"], 1.0),
        "train/grad_norm": grad_norm,
        "train/lr": lr,
        "train/budget": budget,
        "train/kept_visual_fraction": totals["kept_visual"] / max(totals["visual"], 1.0),
        "train/teacher_kept_visual_fraction": totals["teacher_kept_visual"] / max(totals["visual"], 1.0),
        "train/kept_visual_tokens": totals["kept_visual"] / seqs,
        "rollout/length": totals["length_sum"] / seqs,
        "rollout/stop_rate": totals["stopped"] / seqs,
    }
    if totals["sensitivity_n"] > 0:
        metrics["train/sensitivity"] = totals["sensitivity_sum"] / totals["sensitivity_n"]
    if totals["graded"] > 0:
        metrics.update(rollout_metrics(totals))
    if "rl_rollouts" in totals:
        metrics.update(rl_metrics(totals))
    if totals.get("layer_sequences", 0.0) > 0:  # method.layer_schedule: the mean K the step pruned at
        metrics["train/prune_layer"] = totals["layer_sum"] / totals["layer_sequences"]
    return metrics


def rollout_metrics(totals: dict[str, Any]) -> dict[str, float]:
    """Returns the on-policy rollouts' metrics (SCOPD Fig. 7) from the sums of ``training.steps.rollout_sums``:
    accuracy, format compliance, mean length of correct and of wrong rollouts (each when there is one), and for
    groups (RL) Pass@G and the fractions of groups all correct, mixed and all wrong."""
    graded, correct = totals["graded"], totals["correct"]
    metrics = {"rollout/accuracy": correct / graded, "rollout/format_rate": totals["formatted"] / graded}
    if correct > 0:
        metrics["rollout/length_correct"] = totals["correct_length_sum"] / correct
    if graded > correct:
        metrics["rollout/length_wrong"] = totals["wrong_length_sum"] / (graded - correct)
    groups = totals["groups"]
    if groups > 0:
        mixed, all_correct = totals["groups_mixed"] / groups, totals["groups_all_correct"] / groups
        metrics.update(
            {
                "rollout/pass_at_group": mixed + all_correct,
                "rollout/groups_all_correct": all_correct,
                "rollout/groups_mixed": mixed,
                "rollout/groups_all_wrong": 1.0 - mixed - all_correct,
            }
        )
    return metrics
