"""Group-relative policy gradient (GRPO, GSPO, DAPO) as pure functions of tensors (training-methods spec §5.4).

The loop's ``micro_loss`` calls these for ``method.objective=rl``; the per-token loss they return is reduced
like every other objective (``method.reduction`` over the whole optimizer step), which gives TRL's
``GRPOTrainer._compute_loss`` aggregations with whole-step normalisers:

- ``seq_mean_token_mean`` = TRL ``loss_type="grpo"`` (per-sequence token mean, then the mean over sequences);
- ``global_token_mean`` = TRL ``"dapo"`` (Σ over the step's tokens / their count; TRL's ``"bnpo"`` is the same
  formula with a per-micro-batch count, so it equals this one when a step has one micro-batch);
- ``constant_length`` = TRL ``"dr_grpo"`` (Σ / (sequences · max_new_tokens)).

The old log-probabilities are those of the policy that sampled the rollouts: on the step that generates them
the detached current ones (every ratio 1, gradient ∇log π), kept for the μ − 1 following steps that reuse the
rollouts (``method.rl.num_iterations`` = μ, TRL's semantics), where the ratios move away from 1 and the clip
acts (``training.groups.stored_rollouts``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

STD_KINDS = ("population", "sample")
"""``population``: divide by G (the SCOPD authors' GRPO); ``sample``: by G − 1 (TRL's Bessel ``nanstd``)."""
IS_LEVELS = ("token", "sequence")
"""``token``: ρ_t per token (GRPO, DAPO); ``sequence``: GSPO's s_i = exp(mean_t log ρ_t) on every token."""
ADVANTAGE_EPS = 1e-4
"""Added to the group std before dividing (TRL's constant), so a zero-variance group gives A = 0, not NaN."""


@dataclass
class GroupBatch:
    """The rewards and advantages of one micro-batch's rollouts (groups of G consecutive rows).

    Attributes:
        rewards: (B,) float64 reward of each rollout (after any overlong penalty).
        advantages: (B,) float32 group-normalised advantage of each rollout.
        group_size: G.
        informative: groups in this micro-batch whose rewards are not all equal.
        unscorable: rollouts whose item the reward could not score (they are masked out of the loss).
        drawn: prompts drawn to refill zero-variance groups (dynamic sampling; counted on one micro-batch).
        dropped: zero-variance groups left after the last refill draw (masked out of the loss).
    """

    rewards: torch.Tensor
    advantages: torch.Tensor
    group_size: int
    informative: int
    unscorable: int
    drawn: int
    dropped: int


def group_advantages(rewards: torch.Tensor, group_size: int, *, scale: bool, std: str) -> torch.Tensor:
    """Returns (B,) A_i = r_i − mean_g(r), divided by std_g(r) + 1e-4 when ``scale`` (GRPO, Shao et al. Eq. 3).

    Args:
        rewards: (B,) float rewards, B a multiple of ``group_size``; group g is rows g·G … g·G + G − 1.
        group_size: G >= 2.
        scale: divide by the group std (TRL ``scale_rewards="group"``); False = Dr.GRPO's centring only.
        std: ``population`` (÷G) or ``sample`` (÷(G−1)), see ``STD_KINDS``.
    """
    if rewards.dim() != 1 or rewards.numel() % group_size != 0:
        raise ValueError(f"rewards {tuple(rewards.shape)} must be (B,) with B a multiple of G={group_size}")
    grouped = rewards.view(-1, group_size)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    if scale:
        spread = grouped.std(dim=1, keepdim=True, correction=0 if std == "population" else 1)
        centred = centred / (spread + ADVANTAGE_EPS)
    return centred.reshape(-1)


def informative_groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Returns (B / G,) bool: whether each group's rewards are not all equal (it carries a signal)."""
    grouped = rewards.view(-1, group_size)
    return (grouped != grouped[:, :1]).any(dim=1)


def token_logprobs(logits: torch.Tensor, ids: torch.Tensor, temperature: float, chunk_size: int) -> torch.Tensor:
    """Returns (B, T) fp32 log π(y_t | ·) of the sampled ids under softmax(logits / temperature).

    Computed in fp32 over chunks of ``chunk_size`` rows (never a (B, T, V) fp32 copy at once).

    Args:
        logits: (B, T, V) logits predicting each prefix token.
        ids: (B, T) int64 prefix ids.
        temperature: the rollouts' sampling temperature (the policy that produced y, as TRL).
        chunk_size: rows of the flattened (B·T, V) logits per fp32 chunk.
    """
    flat, targets = logits.reshape(-1, logits.shape[-1]), ids.reshape(-1)
    parts = []
    for start in range(0, flat.shape[0], chunk_size):
        rows = flat[start : start + chunk_size].float() / temperature
        picked = rows.gather(1, targets[start : start + chunk_size, None]).squeeze(1)
        parts.append(picked - torch.logsumexp(rows, dim=-1))
    return torch.cat(parts).view(ids.shape)


def clipped_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    epsilon_low: float,
    epsilon_high: float,
    level: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns the (B, T) PPO clipped surrogate loss −min(wA, clip(w, 1−ε_low, 1+ε_high)A) and (B, T) clipped.

    ``level="token"``: w_t = exp(log π_t − log π_old,t) (GRPO; DAPO's clip-higher is ε_high > ε_low).
    ``level="sequence"``: w_i = exp(Σ_t m_t (log π_t − log π_old,t) / Σ_t m_t) on every token (GSPO Eq. 7).
    ``clipped`` marks positions where the clip bound is the active term (w < 1−ε_low with A < 0, or
    w > 1+ε_high with A > 0), the quantity TRL logs as its clip ratio.

    Args:
        logp: (B, T) fp32 log-probabilities of the current policy (grad attached).
        old_logp: (B, T) fp32 log-probabilities of the policy that sampled (detached).
        advantages: (B,) advantages.
        mask: (B, T) bool response positions that count.
        epsilon_low: ε_low > 0.
        epsilon_high: ε_high > 0.
        level: ``token`` or ``sequence`` (``IS_LEVELS``).
    """
    log_ratio = torch.where(mask, logp - old_logp, torch.zeros((), dtype=logp.dtype, device=logp.device))
    if level == "sequence":
        log_ratio = (log_ratio.sum(dim=-1) / mask.sum(dim=-1).clamp_min(1)).unsqueeze(-1)
    ratio = torch.exp(log_ratio)
    adv = advantages.to(logp.dtype).unsqueeze(-1)
    bounded = torch.clamp(ratio, 1.0 - epsilon_low, 1.0 + epsilon_high)
    loss = -torch.minimum(ratio * adv, bounded * adv)
    clipped = ((ratio < 1.0 - epsilon_low) & (adv < 0)) | ((ratio > 1.0 + epsilon_high) & (adv > 0))
    return loss.expand_as(logp), clipped.expand_as(mask) & mask


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Returns (B, T) the k3 estimator exp(r) − r − 1 with r = log π_ref − log π_θ, of KL(π_θ‖π_ref) (Schulman).

    Unbiased for KL(π_θ‖π_ref) under samples of π_θ, non-negative; its gradient flows through ``logp``.
    """
    delta = ref_logp - logp
    return torch.exp(delta) - delta - 1.0


def overlong_penalty(lengths: torch.Tensor, max_length: int, cache_fraction: float) -> torch.Tensor:
    """Returns (B,) DAPO's soft overlong punishment (Yu et al. 2025, Eq. 13), added to the reward.

    With L_max = ``max_length`` and L_cache = cache_fraction·L_max: 0 for |y| <= L_max − L_cache, then
    ((L_max − L_cache) − |y|) / L_cache down to −1 at |y| = L_max (rollouts never exceed L_max here).

    Args:
        lengths: (B,) int response lengths |y|.
        max_length: ``max_new_tokens``.
        cache_fraction: L_cache / L_max in (0, 1) (DAPO: 4096 / 20480 = 0.2).
    """
    cache = cache_fraction * max_length
    over = lengths.double() - (max_length - cache)
    return -(over.clamp_min(0.0) / cache).clamp_max(1.0)


def rl_metrics(totals: dict[str, float]) -> dict[str, float]:
    """Returns the per-step policy-gradient metrics from the summed statistics of ``rl_stats``."""
    rollouts = max(totals["rl_rollouts"], 1.0)
    mean = totals["rl_reward_sum"] / rollouts
    variance = max(totals["rl_reward_sq_sum"] / rollouts - mean * mean, 0.0)
    return {
        "rl/reward_mean": mean,
        "rl/reward_std": variance**0.5,
        "rl/informative_group_fraction": totals["rl_informative"] / max(totals["rl_groups"], 1.0),
        "rl/clip_fraction": totals["rl_clipped"] / max(totals["selected"], 1.0),
        "rl/kl": totals["rl_kl_sum"] / max(totals["selected"], 1.0),
        "rl/unscorable": totals["rl_unscorable"],
        "rl/refill_draws": totals["rl_drawn"],
        "rl/dropped_groups": totals["rl_dropped"],
        "rl/length_mean": totals["length_sum"] / max(totals["sequences"], 1.0),
    }


def rl_stats(
    group: GroupBatch, per_token_kl: torch.Tensor | None, clipped: torch.Tensor, mask: torch.Tensor
) -> dict[str, float]:
    """Returns one micro-batch's policy-gradient statistics as sums (they add over micro-batches and ranks)."""
    rewards = group.rewards
    return {
        "rl_rollouts": float(rewards.numel()),
        "rl_reward_sum": float(rewards.sum()),
        "rl_reward_sq_sum": float((rewards * rewards).sum()),
        "rl_groups": float(rewards.numel() // group.group_size),
        "rl_informative": float(group.informative),
        "rl_clipped": float(clipped.sum()),
        "rl_kl_sum": 0.0 if per_token_kl is None else float(per_token_kl.detach()[mask].sum()),
        "rl_unscorable": float(group.unscorable),
        "rl_drawn": float(group.drawn),
        "rl_dropped": float(group.dropped),
    }
