"""The one definition of how a budget fraction turns into a per-image token count."""

from __future__ import annotations


def check_budget(budget: float, key: str = "budget") -> float:
    """Returns ``budget`` unchanged if it lies in (0, 1]; otherwise raises naming the key, the value and the fix."""
    if not isinstance(budget, (int, float)) or not 0.0 < float(budget) <= 1.0:
        raise ValueError(
            f"{key}={budget!r} is outside (0, 1]: a budget is the kept fraction of visual tokens; "
            f"set {key} to a value in (0, 1], e.g. {key}=0.1 (1 = full context)"
        )
    return float(budget)


def tokens_to_keep(budget: float, num_tokens: int) -> int:
    """Returns k = clamp(round(budget * N), 1, N): the exact kept count for one image of N post-merger tokens."""
    check_budget(budget)
    if num_tokens < 1:
        raise ValueError(f"an image must have at least one visual token, got N={num_tokens}")
    return max(1, min(num_tokens, round(budget * num_tokens)))
