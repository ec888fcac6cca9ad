"""Float64 brute-force references, written from the definitions with explicit probabilities and Python loops.

Nothing here calls sparsectx; it exists so the production code is checked against an independent derivation.
"""

from __future__ import annotations

import torch


def probs64(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Returns softmax(logits / T) along the last axis in float64, as exp(z - max) / Σ exp(z - max)."""
    z = logits.double() / temperature
    e = torch.exp(z - z.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1, keepdim=True)


def kl64(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Returns Σ_v a_v log(a_v / b_v) over the last axis (terms with a_v = 0 are 0)."""
    terms = torch.where(a > 0, a * torch.log(a / b), torch.zeros_like(a))
    return terms.sum(-1)


def gjsd64(q: torch.Tensor, p: torch.Tensor, beta: float) -> torch.Tensor:
    """Returns β·KL(q‖M) + (1-β)·KL(p‖M), M = βq + (1-β)p (GKD Eq. 1); β=0 → KL(q‖p), β=1 → KL(p‖q)."""
    if beta == 0:
        return kl64(q, p)
    if beta == 1:
        return kl64(p, q)
    m = beta * q + (1 - beta) * p
    return beta * kl64(q, m) + (1 - beta) * kl64(p, m)


def divergence64(kind: str, q: torch.Tensor, p: torch.Tensor, beta: float) -> torch.Tensor:
    """Returns the named divergence between teacher q and student p (probability vectors)."""
    if kind == "forward_kl":
        return kl64(q, p)
    if kind == "reverse_kl":
        return kl64(p, q)
    return gjsd64(q, p, beta)


def support64(student: torch.Tensor, teacher: torch.Tensor, sampled: int | None, k: int) -> list[int]:
    """Returns sorted(set(top-k teacher ids) | set(top-k student ids) | {sampled}) for one (V,) position."""
    top_t = set(teacher.argsort(descending=True)[:k].tolist())
    top_s = set(student.argsort(descending=True)[:k].tolist())
    ids = top_t | top_s | ({sampled} if sampled is not None else set())
    return sorted(ids)


def extend64(p: torch.Tensor, support: list[int]) -> torch.Tensor:
    """Returns [p_v for v in support] + [1 - Σ_support p_v]; no tail when the support is everything."""
    on = p[support]
    if len(support) == p.shape[-1]:
        return on
    return torch.cat([on, (1 - on.sum()).reshape(1)])


def per_position64(
    kind: str,
    student: torch.Tensor,
    teacher: torch.Tensor,
    mask: torch.Tensor,
    sampled: torch.Tensor | None,
    beta: float,
    top_k: int | None,
    temperature: float,
) -> torch.Tensor:
    """Returns the (B, T) float64 divergence by looping over positions; differentiable w.r.t. ``student``."""
    batch, steps, _ = student.shape
    out = []
    for i in range(batch):
        row = []
        for t in range(steps):
            if not mask[i, t]:
                row.append(student.new_zeros((), dtype=torch.float64))
                continue
            p = probs64(student[i, t], temperature)
            q = probs64(teacher[i, t].detach(), temperature)
            if top_k is not None:
                y = None if sampled is None else int(sampled[i, t])
                ids = support64(student[i, t].detach(), teacher[i, t].detach(), y, top_k)
                p, q = extend64(p, ids), extend64(q, ids)
            row.append(divergence64(kind, q, p, beta))
        out.append(torch.stack(row))
    return torch.stack(out)


def trl_gkd_jsd_loss64(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    labels: torch.Tensor,
    beta: float,
    temperature: float,
) -> torch.Tensor:
    """Returns TRL GKDTrainer.generalized_jsd_loss re-derived from its definition (GKD Eq. 1, batchmean).

    TRL: logits / T, log-softmax; β = 0 → KL(teacher‖student), β = 1 → KL(student‖teacher), otherwise
    β·KL(teacher‖M) + (1-β)·KL(student‖M) with M = β·teacher + (1-β)·student; then summed over the vocabulary
    and the positions with labels != -100, divided by the number of such positions.
    """
    total = torch.zeros((), dtype=torch.float64)
    count = 0
    for i in range(labels.shape[0]):
        for t in range(labels.shape[1]):
            if labels[i, t] == -100:
                continue
            p = probs64(student_logits[i, t], temperature)
            q = probs64(teacher_logits[i, t], temperature)
            total = total + gjsd64(q, p, beta)
            count += 1
    return total / count
