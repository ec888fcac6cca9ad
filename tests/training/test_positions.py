"""Position selectors: k_i = ⌈ρ·T_i⌉, planted sensitivity, seeded randomness, ties, registry entries."""

from __future__ import annotations

import pytest
import torch

from sparsectx.training import POSITION_SELECTORS
from sparsectx.training.positions import positions_per_sequence, select_top_fraction, visual_sensitivity

from .reference import gjsd64, probs64


def lengths_mask(lengths: list[int], steps: int) -> torch.Tensor:
    return torch.arange(steps).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)


def test_k_is_ceil_of_rho_times_length_without_float_round_up() -> None:
    mask = lengths_mask([30, 31, 0, 1, 10, 9], 40)
    assert positions_per_sequence(mask, 0.1).tolist() == [3, 4, 0, 1, 1, 1]
    assert positions_per_sequence(mask, 1.0).tolist() == [30, 31, 0, 1, 10, 9]
    with pytest.raises(ValueError, match="fraction"):
        positions_per_sequence(mask, 0.0)


def test_sensitivity_selection_finds_planted_positions() -> None:
    gen = torch.Generator().manual_seed(0)
    batch, steps, vocab = 3, 20, 50
    mask = lengths_mask([20, 15, 11], steps)
    student = torch.randn(batch, steps, vocab, generator=gen).requires_grad_()
    # Small shifts everywhere, large ones at the planted positions.
    probe = student.detach() + 0.05 * torch.randn(batch, steps, vocab, generator=gen)
    planted = {0: [3, 11], 1: [0, 14], 2: [7, 10]}  # ⌈0.1·20⌉ = ⌈0.1·15⌉ = ⌈0.1·11⌉ = 2
    for i, ts in planted.items():
        for t in ts:
            probe[i, t] += 6 * torch.randn(vocab, generator=gen)  # vision changes this prediction a lot
    probe[1, 17] += 50 * torch.randn(vocab, generator=gen)  # beyond the sequence end: must never be chosen

    scores = visual_sensitivity(student, probe, mask, chunk_size=7, temperature=1.0)
    assert not scores.requires_grad and bool((scores[~mask] == 0).all())
    # SCOPD Eq. 7 in float64: JSD_0.5 between the two student views.
    want = gjsd64(probs64(probe, 1.0), probs64(student.detach(), 1.0), 0.5) * mask
    torch.testing.assert_close(scores.double(), want, atol=1e-6, rtol=1e-5)

    top = POSITION_SELECTORS.get("top_sensitivity")
    assert top.score == "sensitivity"
    chosen = top.select(mask, scores, generator=None, fraction=0.1)
    for i, ts in planted.items():
        assert chosen[i].nonzero().squeeze(1).tolist() == ts

    bottom = POSITION_SELECTORS.get("bottom_sensitivity").select(mask, scores, generator=None, fraction=0.5)
    for i, ts in planted.items():
        assert not bool(bottom[i, ts].any())
        assert int(bottom[i].sum()) == int(positions_per_sequence(mask, 0.5)[i])
    assert not bool((bottom & ~mask).any())


def test_top_kl_selects_largest_scores_per_sequence() -> None:
    mask = lengths_mask([5, 3], 5)
    scores = torch.tensor([[0.1, 0.9, 0.3, 0.8, 0.2], [0.5, 0.1, 0.7, 9.0, 9.0]])
    chosen = POSITION_SELECTORS.get("top_kl").select(mask, scores, generator=None, fraction=0.4)
    # k = ⌈0.4·5⌉ = 2 and ⌈0.4·3⌉ = 2; the 9.0 scores sit beyond sequence 1's end and are ignored.
    assert chosen.tolist() == [[False, True, False, True, False], [True, False, True, False, False]]


def test_ties_go_to_the_earlier_position() -> None:
    mask = torch.ones(1, 6, dtype=torch.bool)
    mask[0, 0] = False
    scores = torch.zeros(1, 6)
    assert select_top_fraction(scores, mask, 0.5).tolist() == [[False, True, True, True, False, False]]


def test_random_selection_is_seeded_and_respects_the_mask() -> None:
    mask = lengths_mask([40, 25, 0, 7], 40)
    rule = POSITION_SELECTORS.get("random")
    assert rule.score == "none"

    def draw(seed: int) -> torch.Tensor:
        return rule.select(mask, None, generator=torch.Generator().manual_seed(seed), fraction=0.2)

    first, again, other = draw(123), draw(123), draw(124)
    assert torch.equal(first, again)
    assert not torch.equal(first, other)
    assert not bool((first & ~mask).any())
    assert first.sum(-1).tolist() == positions_per_sequence(mask, 0.2).tolist() == [8, 5, 0, 2]
    with pytest.raises(ValueError, match="Generator"):
        rule.select(mask, None, generator=None, fraction=0.2)


def test_all_returns_the_valid_mask() -> None:
    mask = lengths_mask([3, 0, 5], 5)
    rule = POSITION_SELECTORS.get("all")
    assert rule.score == "none"
    assert torch.equal(rule.select(mask, None, generator=None), mask)
    with pytest.raises(TypeError):
        rule.select(mask, None, generator=None, fraction=0.1)  # an unknown YAML key is an error


def test_registry_and_score_kinds() -> None:
    assert POSITION_SELECTORS.names() == ["all", "bottom_sensitivity", "random", "tip", "top_kl", "top_sensitivity"]
    kinds = {name: POSITION_SELECTORS.get(name).score for name in POSITION_SELECTORS}
    assert kinds == {
        "all": "none",
        "bottom_sensitivity": "sensitivity",
        "random": "none",
        "tip": "tip",
        "top_kl": "teacher_divergence",
        "top_sensitivity": "sensitivity",
    }
    with pytest.raises(ValueError, match="scores=None"):
        POSITION_SELECTORS.get("top_sensitivity").select(lengths_mask([2], 2), None, generator=None, fraction=0.5)
