"""Typed schema of ``method.rl``: group-relative policy gradient (GRPO / GSPO / DAPO) and its reward.

Split from ``sparsectx.training.method`` (the other method parts); the same rules: every field required,
each ``__post_init__`` names the full dotted key, the value and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparsectx.checks import check_choice, check_params, check_registry_key
from sparsectx.training.rewards import REWARD_CHECKS, REWARDS
from sparsectx.training.rl import IS_LEVELS, STD_KINDS


@dataclass
class RewardConfig:
    """``method.rl.reward``: the reward of each rollout (a ``REWARDS`` key) and its keyword arguments."""

    name: str
    """correct_format (benchmark-scorer correctness + format, ``sparsectx.training.rewards``) | judge_format (a
    chat model judges the correctness, ``sparsectx.training.judge_reward``)."""
    params: dict[str, Any]
    """The reward's keyword arguments, exactly (correct_format: correct_weight, format_weight; judge_format: also
    judge, prompt, on_unreadable)."""

    def __post_init__(self) -> None:
        check_registry_key(REWARDS, self.name, "method.rl.reward.name")
        check_params(REWARDS.get(self.name), self.params, set(), "method.rl.reward.params")
        if self.name in REWARD_CHECKS:
            REWARD_CHECKS[self.name](self.params)


@dataclass
class RLConfig:
    """``method.rl``: group-relative policy gradient (GRPO / GSPO / DAPO; training-methods spec §5.4)."""

    group_size: int
    """G >= 2 rollouts per prompt, all from the prompt's one pruned context."""
    reward: RewardConfig
    scale_rewards: bool
    """Divide the centred rewards by the group std + 1e-4 (TRL ``scale_rewards="group"``); False = Dr.GRPO."""
    std: str
    """population (÷G, the SCOPD authors' GRPO) | sample (÷(G−1), TRL's ``nanstd``)."""
    epsilon_low: float
    """ε_low > 0 of the clip range [1 − ε_low, 1 + ε_high]."""
    epsilon_high: float
    """ε_high > 0 (DAPO's clip-higher: ε_high > ε_low)."""
    importance_sampling_level: str
    """token (GRPO, DAPO) | sequence (GSPO's length-normalised sequence ratio)."""
    num_iterations: int
    """μ >= 1 optimizer steps per batch of rollouts (TRL's ``num_iterations``): the rollouts of step g are
    reused on steps g+1 … g+μ−1 against the log-probabilities of the policy that sampled them; 1 = on-policy."""
    beta: float
    """Weight of the k3 KL(π_θ‖π_ref) to the frozen initial model (needs ``method.teacher.kind=frozen``)."""
    mask_truncated: bool
    """Drop rollouts that hit ``max_new_tokens`` without stopping from the loss (DAPO's overlong filtering)."""
    overlong_cache_fraction: float | None
    """DAPO's soft overlong punishment with L_cache = fraction · max_new_tokens; null = off."""
    dynamic_sampling: bool
    """DAPO: replace zero-variance groups by groups of newly drawn prompts until the batch is full."""
    max_draws: int
    """Refill rounds per optimizer step under dynamic sampling; groups still uninformative are dropped."""
    chunk_size: int
    """Rows per fp32 chunk of the log-probability computation."""

    def __post_init__(self) -> None:
        if self.group_size < 2:
            raise ValueError(
                f"method.rl.group_size={self.group_size} must be >= 2: a group of one has no relative "
                "advantage (GRPO uses 8)"
            )
        check_choice(self.std, STD_KINDS, "method.rl.std")
        check_choice(self.importance_sampling_level, IS_LEVELS, "method.rl.importance_sampling_level")
        for key, eps in (("epsilon_low", self.epsilon_low), ("epsilon_high", self.epsilon_high)):
            if not 0.0 < eps < 1.0:
                raise ValueError(f"method.rl.{key}={eps!r} must lie in (0, 1) (GRPO 0.2, GSPO 3e-4/4e-4)")
        if self.num_iterations < 1:
            raise ValueError(
                f"method.rl.num_iterations={self.num_iterations} must be >= 1 (optimizer steps per batch of "
                "rollouts: 1 = on-policy, the SCOPD authors' GRPO uses 2)"
            )
        if not self.beta >= 0.0:
            raise ValueError(f"method.rl.beta={self.beta!r} must be >= 0 (0 = no KL to the reference)")
        frac = self.overlong_cache_fraction
        if frac is not None and not 0.0 < frac < 1.0:
            raise ValueError(f"method.rl.overlong_cache_fraction={frac!r} must lie in (0, 1), or null (off)")
        if self.max_draws < 0 or (self.max_draws > 0 and not self.dynamic_sampling):
            raise ValueError(
                f"method.rl.max_draws={self.max_draws} must be >= 0, and 0 unless method.rl.dynamic_sampling"
            )
        if self.chunk_size < 1:
            raise ValueError(f"method.rl.chunk_size={self.chunk_size} must be >= 1")
