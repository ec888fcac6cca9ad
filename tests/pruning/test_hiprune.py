"""HiPrune against a float64 brute force of its rule, its two reference-code fixes, exact k and bad params."""

from __future__ import annotations

import pytest
import torch

from sparsectx.budget import tokens_to_keep
from sparsectx.pruning import declared_signals, select_tokens
from sparsectx.pruning.config import PrunerConfig
from sparsectx.visual import ImageTokens, VisionSignals

GRIDS = [(1, 1, 7), (1, 4, 4), (1, 3, 5), (1, 6, 2), (2, 3, 4), (3, 2, 2)]


def grid_image(grid, seed, ties=False):
    """Returns an image on merged ``grid`` with float64-drawn attention (quantised to force ties if asked)."""
    t, h, w = grid
    n = t * h * w
    g = torch.Generator().manual_seed(seed)
    obj, last = (torch.rand(n, generator=g, dtype=torch.float64) for _ in range(2))
    if ties:
        obj, last = (torch.floor(x * 3) for x in (obj, last))
    return ImageTokens(
        embeds=torch.randn(n, 6, generator=g, dtype=torch.float64).float(),
        grid=grid,
        attention_received=last.float(),
        keys=torch.randn(n, 4, generator=g, dtype=torch.float64).float(),
        object_attention=obj.float(),
    )


def brute_force(obj, last, grid, k, alpha):
    """HiPrune's rule written out token by token in float64 with Python (frame, row, column) coordinates."""
    t, h, w = grid
    obj, last = obj.double().tolist(), last.double().tolist()
    n = t * h * w
    rank = lambda scores, pool: sorted(pool, key=lambda i: (-scores[i], i))  # noqa: E731
    a = min(k, round(alpha * k / 5))
    anchors = rank(obj, range(n))[:a]
    buffers = set()
    for i in anchors:
        f, r, c = i // (h * w), (i % (h * w)) // w, i % w
        for rr, cc in ((r - 1, c), (r, c - 1), (r, c + 1), (r + 1, c)):
            if 0 <= rr < h and 0 <= cc < w:
                buffers.add(f * h * w + rr * w + cc)
    buffers -= set(anchors)
    buffers = rank(obj, buffers)[: k - a]
    chosen = set(anchors) | set(buffers)
    registers = rank(last, [i for i in range(n) if i not in chosen])[: k - len(chosen)]
    return sorted(chosen | set(registers))


def hiprune(image, budget, alpha):
    return select_tokens("hiprune", image, torch.zeros(2, 6), budget, torch.Generator(), {"alpha": alpha})


@pytest.mark.parametrize("grid", GRIDS)
@pytest.mark.parametrize("alpha", [0.0, 0.1, 0.5, 1.0])
@pytest.mark.parametrize("ties", [False, True])
def test_matches_float64_brute_force(grid, alpha, ties):
    for seed in range(4):
        image = grid_image(grid, seed, ties)
        n = image.num_tokens
        for budget in (0.05, 0.1, 0.2, 0.334, 0.5, 0.75, 1.0):
            k = tokens_to_keep(budget, n)
            got = hiprune(image, budget, alpha).indices.tolist()
            want = brute_force(image.object_attention, image.attention_received, grid, k, alpha)
            assert got == want, (grid, alpha, seed, budget)
            assert len(got) == k == len(set(got))


def test_brute_force_has_teeth():
    """Over these inputs anchors and buffers matter: the rule differs from top-k by last-block attention."""
    image = grid_image((1, 6, 6), 0)
    k = 12
    top_last = sorted(torch.sort(image.attention_received, descending=True, stable=True).indices[:k].tolist())
    assert brute_force(image.object_attention, image.attention_received, image.grid, k, 1.0) != top_last


def test_buffers_do_not_wrap_across_row_ends():
    """The anchor ends row 0 of a 3x4 grid: its buffers are its left and lower neighbours, never token 4
    (the next row's first token, which the reference's +1 picks) nor the previous row's end."""
    obj = torch.zeros(12)
    obj[3] = 10.0
    last = torch.arange(12, 0, -1).float()  # registers prefer low indices; token 4 is ranked 4th of the rest
    last[4] = -1.0
    image = ImageTokens(torch.randn(12, 6), (1, 3, 4), last, torch.randn(12, 4), object_attention=obj)
    # k = 5 with alpha = 1: one anchor (3), buffers 2 (left) and 7 (down), two registers (0, 1).
    assert hiprune(image, 5 / 12, 1.0).indices.tolist() == [0, 1, 2, 3, 7]
    obj = torch.zeros(12)
    obj[4] = 10.0  # row 1, column 0: its buffers are 0 (up), 5 (right), 8 (down), never 3
    last = torch.zeros(12)
    last[3] = -1.0
    image = ImageTokens(torch.randn(12, 6), (1, 3, 4), last, torch.randn(12, 4), object_attention=obj)
    assert hiprune(image, 5 / 12, 1.0).indices.tolist() == [0, 1, 4, 5, 8]


def test_anchors_are_never_picked_again_as_registers():
    """Attention received sums over queries (values up to N): the reference's score - 1 mask lets the anchor,
    which here also has the top last-block score, be re-picked. Ours keeps k distinct tokens."""
    n = 20
    obj = torch.zeros(n)
    obj[7] = 1.0
    last = torch.linspace(1.0, 0.5, n)
    last[7] = float(n)  # far above every other score, even after the reference's - 1
    image = ImageTokens(torch.randn(n, 6), (1, 4, 5), last, torch.randn(n, 4), object_attention=obj)
    got = hiprune(image, 0.5, 0.5).indices.tolist()  # k = 10, one anchor (7), buffers 2, 6, 8, 12
    assert got == sorted({7, 2, 6, 8, 12, 0, 1, 3, 4, 5})


@pytest.mark.parametrize("grid", GRIDS + [(1, 32, 32)])
@pytest.mark.parametrize("budget", [0.05, 0.1, 0.112, 0.2, 0.223, 0.334, 1.0])
def test_exactly_k_distinct_tokens(grid, budget):
    image = grid_image(grid, 1)
    for alpha in (0.0, 0.1, 1.0):
        selection = hiprune(image, budget, alpha)
        k = tokens_to_keep(budget, image.num_tokens)
        assert selection.indices.numel() == k == len(set(selection.indices.tolist()))
        assert torch.equal(selection.embeds, image.embeds[selection.indices])


def test_selection_is_prompt_only():
    """The question embeddings (and so any response) never change the selection."""
    image = grid_image((1, 4, 5), 3)
    picks = {
        tuple(
            select_tokens("hiprune", image, q, 0.3, torch.Generator().manual_seed(s), {"alpha": 0.5}).indices.tolist()
        )
        for s, q in enumerate([torch.zeros(1, 6), torch.randn(4, 6), torch.randn(9, 6) * 100])
    }
    assert len(picks) == 1


def test_declares_the_object_block_signal_and_needs_it():
    assert declared_signals("hiprune", {"alpha": 0.1}, seed=0) == VisionSignals(object_attention=True)
    assert declared_signals("visionzip", {"contextual_fraction": 0.5}, seed=0) == VisionSignals()
    image = grid_image((1, 2, 3), 0)
    image.object_attention = None
    with pytest.raises(ValueError, match=r"object_attention.*declared_signals\('hiprune'"):
        hiprune(image, 0.5, 0.1)


@pytest.mark.parametrize("alpha", [-0.1, 1.5, "0.1", True, None])
def test_bad_alpha_is_a_config_error_naming_key_and_range(alpha):
    """Raised by the config itself (PrunerConfig), before any model loads."""
    with pytest.raises(ValueError, match=r"pruner\.params\.alpha=.* is outside \[0, 1\]"):
        PrunerConfig(name="hiprune", stage="pre_llm", params={"alpha": alpha})
