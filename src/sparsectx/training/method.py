"""Typed schema of the ``method`` presets (``conf/method/*.yaml``), checked before any work starts.

Every field is required: the YAML is the single source of values (style conventions 4-5). Each
``__post_init__`` checks ranges and combinations, naming the full dotted key, the value found and the fix.
Components are chosen by registry key (convention 12): divergences, reductions, position selectors and budget
schedules from the math modules; prefix sources and objectives are the names listed here, teacher kinds in
``sparsectx.training.teacher_config``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from sparsectx.checks import check_choice, check_params, check_registry_key
from sparsectx.generation import DecodingConfig
from sparsectx.training.divergences import DIVERGENCES
from sparsectx.training.positions import POSITION_SELECTORS
from sparsectx.training.reduction import REDUCTIONS, STEP_COUNTS, counts_taken
from sparsectx.training.rl_config import RLConfig
from sparsectx.training.schedules import BUDGET_SCHEDULES, LAYER_SCHEDULES
from sparsectx.training.teacher_config import TeacherConfig

PREFIX_KINDS = ("rollout", "reference")
"""``rollout``: on-policy student samples at budget b; ``reference``: the data's reference (fixed prefix)."""
OBJECTIVES = ("distill", "sft", "rl", "distill_sft")
"""``distill``: divergence to a teacher on the prefix; ``sft``: cross-entropy of the prefix tokens; ``rl``:
group-relative policy gradient on G rollouts per prompt (GRPO / GSPO / DAPO, ``method.rl``); ``distill_sft``:
α·divergence + (1 − α)·cross-entropy per position, α = ``method.distill_weight`` (EPIC)."""
PROBE_NESTINGS = ("union", "recompute")
"""How the b+δ probe context is built: ``union`` keeps every token of x_b plus the pruner's b+δ choice (a
nested
superset); ``recompute`` uses the pruner's b+δ selection as is (VisionZip's "official" re-run)."""
LR_SCHEDULES = ("constant", "cosine")

# Keyword arguments the loop itself passes; everything else a component takes comes from the YAML ``params``.
_DIVERGENCE_ARGS = {
    "student_logits",
    "teacher_logits",
    "mask",
    "sampled_ids",
    "top_k",
    "chunk_size",
    "temperature",
}
_SELECTOR_ARGS = {"generator"}
_SCHEDULE_ARGS = {"total_steps", "generator"}


def _takes(fn: Callable[..., Any], name: str) -> bool:
    """Returns whether ``fn`` has a keyword-only argument ``name``."""
    param = inspect.signature(fn).parameters.get(name)
    return param is not None and param.kind is inspect.Parameter.KEYWORD_ONLY


def _check_used(fn: Callable[..., Any], arg: str, value: Any, key: str, component: str) -> None:
    """Raises ValueError unless ``value`` is set exactly when ``fn`` takes the keyword argument ``arg``."""
    if _takes(fn, arg) and value is None:
        raise ValueError(f"{key} is null but {component} needs it; set {key}=<value>")
    if not _takes(fn, arg) and value is not None:
        raise ValueError(f"{key}={value!r} is not used by {component}; set it to null")


@dataclass
class DivergenceConfig:
    """``method.divergence``: the per-position divergence (a ``DIVERGENCES`` key) and its settings."""

    name: str
    """forward_kl (KL(teacher‖student)) | reverse_kl (KL(student‖teacher)) | jsd."""
    beta: float | None
    """jsd's β in [0, 1] (teacher weight in the mixture; 0 = forward KL, 1 = reverse KL); null otherwise."""
    top_k: int | None
    """K of the top-K ∪ sampled-token support with one tail bucket; null = full vocabulary."""
    temperature: float
    """Loss temperature T_loss (independent of the sampling temperature)."""
    chunk_size: int
    """Positions per fp32 chunk of every full-vocabulary operation."""

    def __post_init__(self) -> None:
        check_registry_key(DIVERGENCES, self.name, "method.divergence.name")
        fn = DIVERGENCES.get(self.name)
        _check_used(fn, "beta", self.beta, "method.divergence.beta", f"divergence {self.name!r}")
        check_params(fn, self.extra(), _DIVERGENCE_ARGS, "method.divergence")
        if self.beta is not None and not 0.0 <= self.beta <= 1.0:
            raise ValueError(f"method.divergence.beta={self.beta!r} must lie in [0, 1] (0 = forward KL)")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"method.divergence.top_k={self.top_k!r} must be >= 1, or null for the full vocabulary")
        if not self.temperature > 0:
            raise ValueError(f"method.divergence.temperature={self.temperature!r} must be > 0 (1.0 in SCOPD)")
        if self.chunk_size < 1:
            raise ValueError(f"method.divergence.chunk_size={self.chunk_size!r} must be >= 1")

    def extra(self) -> dict[str, Any]:
        """Returns the divergence's own keyword arguments (``beta`` for jsd, nothing otherwise)."""
        return {} if self.beta is None else {"beta": self.beta}


@dataclass
class PositionsConfig:
    """``method.positions``: which response positions are distilled (a ``POSITION_SELECTORS`` key)."""

    name: str
    """all | top_sensitivity | bottom_sensitivity | top_kl | random | tip."""
    fraction: float | None
    """ρ in (0, 1], the share of each sequence's positions the top-ρ rules keep (⌈ρ T_i⌉); null for all."""
    delta: float | None
    """δ > 0 of the b+δ probe of the sensitivity rules (absolute budget, SCOPD Eq. 5); null otherwise."""
    probe_nesting: str
    """union | recompute (see ``PROBE_NESTINGS``); used with a sensitivity rule only."""

    def __post_init__(self) -> None:
        check_registry_key(POSITION_SELECTORS, self.name, "method.positions.name")
        selector = POSITION_SELECTORS.get(self.name)
        _check_used(selector.select, "fraction", self.fraction, "method.positions.fraction", f"selector {self.name!r}")
        check_params(selector.select, self.extra(), _SELECTOR_ARGS, "method.positions")
        if self.fraction is not None and not 0.0 < self.fraction <= 1.0:
            raise ValueError(
                f"method.positions.fraction={self.fraction!r} is outside (0, 1]: ρ is the share of each "
                "sequence's positions that is distilled (SCOPD+ uses 0.1)"
            )
        if selector.score == "sensitivity":
            if self.delta is None or not self.delta > 0:
                raise ValueError(
                    f"method.positions.delta={self.delta!r} must be > 0: the probe sees budget b + δ "
                    "(SCOPD+ uses 0.01); set method.positions.delta=0.01"
                )
        elif self.delta is not None:
            raise ValueError(
                f"method.positions.delta={self.delta!r} is only used by the sensitivity selectors; set it to null"
            )
        check_choice(self.probe_nesting, PROBE_NESTINGS, "method.positions.probe_nesting")

    def extra(self) -> dict[str, Any]:
        """Returns the selector's own keyword arguments (``fraction`` for the top-ρ rules)."""
        return {} if self.fraction is None else {"fraction": self.fraction}

    @property
    def needs_probe(self) -> bool:
        """Whether the selector ranks visual sensitivity (so the b+δ student forward must run)."""
        return POSITION_SELECTORS.get(self.name).score == "sensitivity"


@dataclass
class ScheduleConfig:
    """``method.schedule``: the student's budget per optimizer step (a ``BUDGET_SCHEDULES`` key).

    ``params`` holds one block per schedule name so a derived preset can switch schedules (YAML merges cannot
    delete keys); only the block of ``name`` is used, and every block is checked against its schedule.
    """

    name: str
    """constant | cosine_curriculum | epic_progressive | uniform."""
    params: dict[str, dict[str, Any]]
    """Schedule name -> its keyword arguments, exactly (``budget``; start/final budgets, α, ...)."""

    def __post_init__(self) -> None:
        check_registry_key(BUDGET_SCHEDULES, self.name, "method.schedule.name")
        if self.name not in self.params:
            raise KeyError(f"method.schedule.params.{self.name} is missing: give the arguments of {self.name!r}")
        for name, block in self.params.items():
            key = f"method.schedule.params.{name}"
            check_registry_key(BUDGET_SCHEDULES, name, key)
            schedule = BUDGET_SCHEDULES.get(name)
            check_params(schedule, block, _SCHEDULE_ARGS, key)
            try:  # the schedule's own checks (final budget above start, α, ...) run here, before any work
                schedule(0, total_steps=1, generator=torch.Generator().manual_seed(0), **block)
            except ValueError as err:
                raise ValueError(f"{key}: {err}") from None

    def kwargs(self) -> dict[str, Any]:
        """Returns the keyword arguments of the chosen schedule."""
        return dict(self.params[self.name])

    def max_budget(self) -> float:
        """Returns the largest budget the chosen schedule can give (its start, or the constant budget)."""
        return float(max(self._budgets()))

    def min_budget(self) -> float:
        """Returns the smallest budget the chosen schedule can give (its final, or the constant budget)."""
        return float(min(self._budgets()))

    def _budgets(self) -> list[float]:
        return [v for k, v in self.kwargs().items() if k.endswith("budget") and isinstance(v, (int, float))]


@dataclass
class LoraSettings:
    """``method.lora``: LoRA on the language model's decoder layers only, or full-parameter training."""

    enabled: bool
    """True = train LoRA adapters; False = train every language-model weight (vision tower stays frozen)."""
    r: int
    """Adapter rank."""
    alpha: int
    """LoRA scaling numerator (scale = alpha / r)."""
    dropout: float
    """Dropout on the adapter input."""
    target_modules: list[str]
    """Projection names adapted inside ``language_model.layers.*`` (never the vision tower)."""

    def __post_init__(self) -> None:
        if self.enabled:
            if self.r < 1 or self.alpha <= 0:
                raise ValueError(f"method.lora.r={self.r} and method.lora.alpha={self.alpha} must be positive")
            if not 0.0 <= self.dropout < 1.0:
                raise ValueError(f"method.lora.dropout={self.dropout} must lie in [0, 1)")
            if not self.target_modules:
                raise ValueError("method.lora.target_modules is empty; list e.g. [q_proj, k_proj, ...]")


@dataclass
class OptimConfig:
    """``method.optim``: AdamW and its learning-rate schedule."""

    lr: float
    """Peak learning rate."""
    weight_decay: float
    """AdamW decoupled weight decay."""
    betas: list[float]
    """AdamW (β1, β2)."""
    eps: float
    """AdamW ε."""
    max_grad_norm: float
    """Global gradient-norm clip before each optimizer step."""
    warmup_steps: int
    """Linear warm-up steps from 0 to ``lr``."""
    lr_schedule: str
    """constant | cosine (to 0 at the last step), after warm-up."""

    def __post_init__(self) -> None:
        if not self.lr > 0 or self.weight_decay < 0 or not self.eps > 0 or not self.max_grad_norm > 0:
            raise ValueError(
                f"method.optim: lr={self.lr}, eps={self.eps} and max_grad_norm={self.max_grad_norm} must be "
                "> 0, "
                f"weight_decay={self.weight_decay} >= 0"
            )
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise ValueError(f"method.optim.betas={list(self.betas)} must be two values in [0, 1)")
        if self.warmup_steps < 0:
            raise ValueError(f"method.optim.warmup_steps={self.warmup_steps} must be >= 0")
        check_choice(self.lr_schedule, LR_SCHEDULES, "method.optim.lr_schedule")


@dataclass
class MethodConfig:
    """``method``: one training method, composed from registry-named parts (``conf/method/<name>.yaml``)."""

    name: str
    """The preset's file stem (used in the run directory)."""
    prefix: str
    """Where the response prefixes come from: rollout | reference."""
    objective: str
    """distill (divergence to the teacher) | sft (cross-entropy of the reference at budget b)."""
    reduction: str
    """A ``REDUCTIONS`` key (seq_mean_token_mean | global_token_mean | constant_length), normalised over the whole
    optimizer step."""
    effective_batch_size: int
    """Prompts (questions) per optimizer step over all processes (= processes x micro_batch_size x grad_accum);
    each brings ``rollouts_per_prompt`` sequences (objective ``rl``: ``rl.group_size``)."""
    rollouts_per_prompt: int
    """k >= 1 independent sampled rollouts of each prompt, each distilled as its own sequence under the method's
    reduction (the mean over all k x ``effective_batch_size`` sequences). They share the prompt's one encoding
    and pruner selection and are distinct draws of the step's rollout generator. k > 1 needs sampled rollouts
    (``prefix=rollout``, ``rollout.do_sample=true``); objective ``rl`` keeps 1 and sets ``rl.group_size``."""
    teacher: TeacherConfig
    divergence: DivergenceConfig
    positions: PositionsConfig
    schedule: ScheduleConfig
    rollout: DecodingConfig
    lora: LoraSettings
    optim: OptimConfig
    rl: RLConfig | None
    """The policy-gradient settings, for objective ``rl`` only; null otherwise."""
    distill_weight: float | None
    """α in [0, 1] of objective ``distill_sft``: α·divergence + (1 − α)·CE (EPIC: 0.5); null otherwise."""
    train_vision: bool
    """Full-parameter updates of the vision encoder and merger too (LT-OPD, seed 000 App. B), not only the
    language model: the student's loss forward recomputes the tower with gradients
    (``sparsectx.training.vision_training``). Needs ``lora.enabled=false``."""
    layer_schedule: str | None
    """In-LLM pruners only: a ``LAYER_SCHEDULES`` key that moves the pruning layer K over training, from the
    LLM's depth (nothing dropped) to ``pruner.layer`` (EPIC's layer consistency distillation:
    ``epic_deep_to_shallow``); student and teacher prune at the step's K. null = ``pruner.layer`` throughout.
    A pre-LLM pruner with a layer schedule is refused (``TrainConfig``)."""

    def __post_init__(self) -> None:
        check_choice(self.prefix, PREFIX_KINDS, "method.prefix")
        check_choice(self.objective, OBJECTIVES, "method.objective")
        self._check_reduction()
        if self.effective_batch_size < 1:
            raise ValueError(f"method.effective_batch_size={self.effective_batch_size} must be >= 1")
        self._check_rollouts()
        if self.objective == "sft" and self.teacher.kind != "none":
            raise ValueError(
                f"method.teacher.kind={self.teacher.kind!r} with method.objective='sft': SFT has no teacher; "
                "set method.teacher.kind=none"
            )
        if self.objective == "sft" and self.prefix != "reference":
            raise ValueError("method.objective='sft' trains on the reference answer; set method.prefix=reference")
        if self.objective == "distill" and self.teacher.kind == "none":
            raise ValueError("method.teacher.kind='none' with method.objective='distill': pick frozen, ema or shared")
        if (
            POSITION_SELECTORS.get(self.positions.name).score in ("teacher_divergence", "tip")
            and self.teacher.kind == "none"
        ):
            raise ValueError(
                f"method.positions.name={self.positions.name!r} ranks the teacher divergence; needs a teacher"
            )
        self._check_rl()
        self._check_distill_sft()
        self._check_train_vision()
        self._check_layer_schedule()

    def _check_reduction(self) -> None:
        """Raises unless ``reduction`` is a ``REDUCTIONS`` key whose function takes only counts the loop offers."""
        check_choice(self.reduction, REDUCTIONS.names(), "method.reduction")
        unknown = [name for name in counts_taken(REDUCTIONS.get(self.reduction)) if name not in STEP_COUNTS]
        if unknown:
            raise ValueError(
                f"method.reduction={self.reduction!r} takes {unknown}, which the loop does not offer; a reduction "
                f"takes keyword-only arguments among {list(STEP_COUNTS)}"
            )

    def _check_layer_schedule(self) -> None:
        """Raises unless ``layer_schedule`` is null or a ``LAYER_SCHEDULES`` key with a non-RL objective."""
        if self.layer_schedule is None:
            return
        check_registry_key(LAYER_SCHEDULES, self.layer_schedule, "method.layer_schedule")
        if self.objective == "rl":
            raise ValueError(
                f"method.layer_schedule={self.layer_schedule!r} with method.objective='rl': the policy-gradient "
                "groups (and their reused rollouts) prune at pruner.layer; set method.layer_schedule=null"
            )

    def _check_rollouts(self) -> None:
        """Raises unless ``rollouts_per_prompt`` is an int >= 1, and 1 unless k distinct samples can be drawn."""
        k = self.rollouts_per_prompt
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"method.rollouts_per_prompt={k!r} must be an int >= 1 (1 = one rollout per prompt)")
        if k == 1:
            return
        if self.objective == "rl":
            raise ValueError(
                f"method.rollouts_per_prompt={k} with method.objective='rl': the policy-gradient methods draw "
                f"method.rl.group_size={self.rl.group_size if self.rl else None} rollouts per prompt; set "
                f"method.rollouts_per_prompt=1 and method.rl.group_size={k}"
            )
        if self.prefix != "rollout":
            raise ValueError(
                f"method.rollouts_per_prompt={k} with method.prefix={self.prefix!r}: a fixed prefix is the same "
                "reference for every copy, so the k sequences would be identical; set method.rollouts_per_prompt=1"
            )
        if not self.rollout.do_sample:
            raise ValueError(
                f"method.rollouts_per_prompt={k} with method.rollout.do_sample=false: greedy decoding gives k "
                "identical rollouts; set method.rollout.do_sample=true or method.rollouts_per_prompt=1"
            )

    def _check_train_vision(self) -> None:
        """Raises unless ``train_vision`` fits the method: full parameters, no RL groups, no teacher budget."""
        if not self.train_vision:
            return
        if self.lora.enabled:
            raise ValueError(
                "method.train_vision=true with method.lora.enabled=true: LoRA adapts the language model only; "
                "set method.lora.enabled=false (full parameters) or method.train_vision=false"
            )
        if self.objective == "rl" or self.teacher.budget_gap is not None:
            raise ValueError(
                f"method.train_vision=true is not supported with method.objective={self.objective!r} or a "
                "method.teacher.budget_gap (their replicated groups and second selections are not replayed "
                "on the recomputed tower); set method.train_vision=false"
            )

    def _check_distill_sft(self) -> None:
        """Raises unless ``distill_weight`` and ``teacher.budget_gap`` fit the objective and the schedule."""
        weight = self.distill_weight
        if (self.objective == "distill_sft") != (weight is not None):
            raise ValueError(
                f"method.distill_weight={weight!r} must be set exactly when method.objective='distill_sft' "
                f"(objective={self.objective!r})"
            )
        if weight is not None:
            if isinstance(weight, bool) or not 0.0 <= weight <= 1.0:
                raise ValueError(
                    f"method.distill_weight={weight!r} must lie in [0, 1]: α·divergence + (1 - α)·CE (EPIC: 0.5)"
                )
            if self.prefix != "reference" or self.teacher.kind == "none":
                raise ValueError(
                    "method.objective='distill_sft' adds the CE of the reference answer: set "
                    "method.prefix=reference and a teacher (method.teacher.kind=shared for EPIC)"
                )
        gap = self.teacher.budget_gap
        if gap is None:
            return
        if self.objective not in ("distill", "distill_sft"):
            raise ValueError(
                f"method.teacher.budget_gap is set with method.objective={self.objective!r}: only the "
                "distillation objectives run the teacher; set it to null"
            )
        top, bottom = self.schedule.max_budget(), self.schedule.min_budget()
        if top >= 1.0:
            raise ValueError(
                f"method.teacher.budget_gap with a schedule reaching budget {top}: the teacher's budget "
                "min(1, b + gap) would not be above the student's; lower the schedule's start below 1"
            )
        if bottom + gap.max > 1.0 + 1e-12:
            raise ValueError(
                f"method.teacher.budget_gap.max={gap.max} on top of the schedule's lowest budget {bottom} "
                "exceeds 1: the teacher's budget would be above 1 for every student budget at that gap; "
                f"lower budget_gap.max to <= {1.0 - bottom:g}, or set budget_gap=null for a teacher that "
                "keeps every visual token"
            )

    def _check_rl(self) -> None:
        """Raises unless ``rl`` is set exactly for objective ``rl`` and its companions fit a policy gradient."""
        if (self.objective == "rl") != (self.rl is not None):
            raise ValueError(
                f"method.rl must be set exactly when method.objective='rl' (objective={self.objective!r}, "
                f"rl={'set' if self.rl is not None else 'null'})"
            )
        if self.rl is None:
            return
        if self.prefix != "rollout" or not self.rollout.do_sample:
            raise ValueError(
                "method.objective='rl' samples G rollouts per prompt: set method.prefix=rollout and "
                "method.rollout.do_sample=true"
            )
        if self.positions.name != "all":
            raise ValueError(f"method.positions.name={self.positions.name!r}: objective 'rl' trains on all")
        wanted = "frozen" if self.rl.beta > 0 else "none"
        if self.teacher.kind != wanted:
            raise ValueError(
                f"method.teacher.kind={self.teacher.kind!r} with method.rl.beta={self.rl.beta}: the KL "
                f"reference is the frozen initial model, so set method.teacher.kind={wanted}"
            )
