"""TIP position selection (Xu et al. 2026): Soft-OR scores against a float64 brute force, and selection."""

from __future__ import annotations

import math

import pytest
import torch

from sparsectx.training.positions import POSITION_SELECTORS, student_entropy, tip_scores


def brute_force_tip(logits: torch.Tensor, divergence: torch.Tensor, mask: torch.Tensor, temperature: float):
    """Returns (B, T) float64 s = Ĥ + D̂ - Ĥ·D̂, axes min-max normalised over each sequence's valid positions."""
    batch, steps, _ = logits.shape
    out = torch.zeros(batch, steps, dtype=torch.float64)
    for i in range(batch):
        valid = [t for t in range(steps) if mask[i, t]]
        if not valid:
            continue
        entropy = {}
        for t in valid:
            p = torch.softmax(logits[i, t].double() / temperature, dim=-1)
            entropy[t] = -sum(float(v) * math.log(float(v)) for v in p if v > 0)
        div = {t: float(divergence[i, t]) for t in valid}

        def scale(values: dict[int, float]) -> dict[int, float]:
            low, high = min(values.values()), max(values.values())
            return {t: 0.0 if high == low else (v - low) / (high - low) for t, v in values.items()}

        h, d = scale(entropy), scale(div)
        for t in valid:
            out[i, t] = h[t] + d[t] - h[t] * d[t]
    return out


def inputs(seed: int, batch: int = 4, steps: int = 7, vocab: int = 11):  # noqa: ANN201
    """Returns seeded (logits, divergence, mask); with batch=4 the rows are full, shorter, one position, none."""
    gen = torch.Generator().manual_seed(seed)
    logits = 3.0 * torch.randn(batch, steps, vocab, generator=gen)
    divergence = torch.rand(batch, steps, generator=gen)
    mask = torch.ones(batch, steps, dtype=torch.bool)
    mask[1, 4:] = False  # a shorter sequence
    if batch == 4:
        mask[2, 1:] = False  # a single valid position: both axes constant
        mask[3] = False  # no valid position
    return logits, divergence, mask


@pytest.mark.parametrize(("seed", "temperature", "chunk"), [(0, 1.0, 2), (1, 1.1, 32), (2, 0.7, 1)])
def test_tip_scores_match_the_float64_brute_force(seed: int, temperature: float, chunk: int) -> None:
    logits, divergence, mask = inputs(seed)
    got = tip_scores(logits, divergence, mask, chunk_size=chunk, temperature=temperature)
    want = brute_force_tip(logits, divergence, mask, temperature)
    assert got.dtype == torch.float32 and not got.requires_grad
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)
    assert bool((got[~mask] == 0).all()) and float(got[2, 0]) == 0.0  # constant axes normalise to 0
    assert float(got.min()) >= 0.0 and float(got.max()) <= 1.0


def test_student_entropy_is_the_full_vocabulary_entropy() -> None:
    logits, _, mask = inputs(3)
    got = student_entropy(logits, mask, chunk_size=4, temperature=1.0)
    p = torch.softmax(logits.double(), dim=-1)
    want = torch.where(mask, -(p * p.log()).sum(-1), 0.0)
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)


def test_soft_or_keeps_both_regions() -> None:
    """An uncertain position and a confident-but-disagreeing one both outrank a confident, agreeing one."""
    vocab = 5
    logits = torch.zeros(1, 3, vocab)
    logits[0, 1, 0] = 20.0  # confident
    logits[0, 2, 0] = 20.0  # confident
    divergence = torch.tensor([[0.0, 2.0, 0.0]])  # position 1 disagrees with the teacher
    mask = torch.ones(1, 3, dtype=torch.bool)
    scores = tip_scores(logits, divergence, mask, chunk_size=8, temperature=1.0)
    assert float(scores[0, 0]) == pytest.approx(1.0) and float(scores[0, 1]) == pytest.approx(1.0, abs=1e-6)
    assert float(scores[0, 2]) == pytest.approx(0.0, abs=1e-6)


def test_tip_selector_keeps_the_top_fraction_of_the_brute_force_ranking() -> None:
    logits, divergence, mask = inputs(4, batch=2, steps=10)
    selector = POSITION_SELECTORS.get("tip")
    assert selector.score == "tip"
    scores = tip_scores(logits, divergence, mask, chunk_size=3, temperature=1.0)
    selected = selector.select(mask, scores, generator=None, fraction=0.3)
    want = brute_force_tip(logits, divergence, mask, 1.0)
    for i in range(2):
        k = math.ceil(0.3 * int(mask[i].sum()))
        order = sorted((t for t in range(10) if mask[i, t]), key=lambda t: -float(want[i, t]))
        assert set(selected[i].nonzero().flatten().tolist()) == set(order[:k])


def test_tip_selector_needs_scores() -> None:
    mask = torch.ones(1, 4, dtype=torch.bool)
    with pytest.raises(ValueError, match="'tip'"):
        POSITION_SELECTORS.get("tip").select(mask, None, generator=None, fraction=0.5)
