"""Properties every registered operator has: exact k per image, determinism, untouched unmerged rows."""

from __future__ import annotations

import pytest
import torch

from sparsectx.budget import tokens_to_keep
from sparsectx.pruning import PRUNERS, pruners_at, select_tokens
from sparsectx.pruning.base import PRE_LLM as PRE_LLM_STAGE

BUDGETS = [0.05, 0.1, 0.2, 0.5, 1.0]
SIZES = [1, 2, 7, 33, 100]
PRE_LLM = pruners_at(PRE_LLM_STAGE)  # in-LLM: tests/engine/test_in_llm


def run(name, image, params, budget, seed=0, question=None):
    """Returns the selection of pruner ``name`` with a fresh generator seeded ``seed``."""
    question = (
        torch.randn(3, image.embeds.shape[1], generator=torch.Generator().manual_seed(99))
        if question is None
        else question
    )
    return select_tokens(name, image, question, budget, torch.Generator().manual_seed(seed), params)


@pytest.mark.parametrize("name", PRE_LLM)
@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("n", SIZES)
def test_exactly_k_sorted_tokens(name, budget, n, make_image, pruner_confs):
    image = make_image(n, seed=n)
    selection = run(name, image, pruner_confs[name]["params"], budget)
    k = tokens_to_keep(budget, n)
    assert selection.indices.tolist() == sorted(set(selection.indices.tolist()))
    assert len(selection.indices) == k
    assert selection.embeds.shape == (k, 8)
    assert [level.shape for level in selection.deepstack] == [(k, 8), (k, 8)]
    if k == n:
        assert selection.indices.tolist() == list(range(n))
        torch.testing.assert_close(selection.embeds, image.embeds, rtol=0, atol=0)


@pytest.mark.parametrize("name", PRE_LLM)
def test_same_seed_same_selection(name, make_image, pruner_confs):
    image = make_image(60, seed=3)
    first = run(name, image, pruner_confs[name]["params"], 0.2, seed=7)
    second = run(name, image, pruner_confs[name]["params"], 0.2, seed=7)
    assert torch.equal(first.indices, second.indices)
    assert torch.equal(first.embeds, second.embeds)
    assert all(torch.equal(a, b) for a, b in zip(first.deepstack, second.deepstack, strict=True))


@pytest.mark.parametrize("name", [name for name in PRE_LLM if not PRUNERS.get(name).merges])
def test_kept_rows_are_gathered_unchanged(name, make_image, pruner_confs):
    image = make_image(40, seed=5, dtype=torch.bfloat16)
    selection = run(name, image, pruner_confs[name]["params"], 0.2)
    assert torch.equal(selection.embeds, image.embeds[selection.indices])
    for got, level in zip(selection.deepstack, image.deepstack, strict=True):
        assert torch.equal(got, level[selection.indices])


@pytest.mark.parametrize("name", [name for name in PRE_LLM if not PRUNERS.get(name).seeded])
def test_unseeded_selection_ignores_the_seed(name, make_image, pruner_confs):
    image = make_image(60, seed=3)
    picks = {
        tuple(run(name, image, pruner_confs[name]["params"], 0.2, seed=seed).indices.tolist()) for seed in range(3)
    }
    assert len(picks) == 1


def test_random_depends_on_seed(make_image):
    image = make_image(100)
    picks = {tuple(run("random", image, {}, 0.1, seed=seed).indices.tolist()) for seed in range(5)}
    assert len(picks) == 5


def test_random_is_roughly_uniform(make_image):
    image = make_image(10, levels=0)
    counts = torch.zeros(10)
    for seed in range(2000):
        counts[run("random", image, {}, 0.3, seed=seed).indices] += 1
    # Each token is kept with probability 3/10: 600 of 2000 draws, sd ~ 20.5.
    assert counts.sub(600).abs().max() < 100
