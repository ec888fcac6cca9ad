"""ZOO-Prune's selection against a float64 brute force of the authors' SADS rule, exact k and bad params."""

from __future__ import annotations

import pytest
import torch

from sparsectx.budget import tokens_to_keep
from sparsectx.pruning import declared_signals, select_tokens
from sparsectx.pruning.config import PrunerConfig
from sparsectx.pruning.zoo_prune import sensitivity_diverse_order
from sparsectx.seeding import derive_seed
from sparsectx.visual import ImageTokens, MergerProbe, VisionSignals

PARAMS = {"probes": 64, "step": 0.01}


def zoo_image(n, seed, d=6, constant=False):
    """Returns an image of n tokens with float64-drawn embeddings and merger sensitivity."""
    g = torch.Generator().manual_seed(seed)
    embeds = torch.randn(n, d, generator=g, dtype=torch.float64)
    sensitivity = torch.full((n,), 2.5, dtype=torch.float64) if constant else torch.rand(n, generator=g) * 3
    return ImageTokens(
        embeds=embeds.float(),
        grid=(1, 1, n),
        attention_received=torch.rand(n, generator=g),
        keys=torch.randn(n, 4, generator=g),
        merger_sensitivity=sensitivity.float(),
    )


def brute_force(embeds, sensitivity, k):
    """The authors' SADS in float64: each step recomputes every candidate's distance to every pick."""
    x = embeds.double()
    s = sensitivity.double()
    n = x.shape[0]
    w = (s - s.min()) / (s.max() - s.min() + 1e-8) if s.max() > s.min() else torch.ones(n, dtype=torch.float64)
    cos = lambda i, j: float(x[i] @ x[j] / (x[i].norm() * x[j].norm()))  # noqa: E731
    picks = [max(range(n), key=lambda i: (float(w[i]), -i))]
    while len(picks) < k:
        scores = {i: float(w[i]) * min(1.0 - cos(i, j) for j in picks) for i in range(n) if i not in picks}
        picks.append(max(scores, key=lambda i: (scores[i], -i)))
    return picks


@pytest.mark.parametrize("n", [1, 2, 9, 40])
@pytest.mark.parametrize("constant", [False, True])
def test_pick_order_matches_float64_brute_force(n, constant):
    for seed in range(3):
        image = zoo_image(n, seed, constant=constant)
        for k in sorted({1, min(2, n), max(1, n // 3), n}):
            got = sensitivity_diverse_order(image.embeds, image.merger_sensitivity, k).tolist()
            assert got == brute_force(image.embeds, image.merger_sensitivity, k), (n, seed, k)


def test_brute_force_has_teeth():
    """Sensitivity and diversity both matter here: the picks differ from top-k sensitivity and from DivPrune."""
    image = zoo_image(40, 0)
    k = 8
    picks = sorted(brute_force(image.embeds, image.merger_sensitivity, k))
    top_sensitive = sorted(torch.topk(image.merger_sensitivity, k).indices.tolist())
    divprune = select_tokens("divprune", image, torch.zeros(1, 6), k / 40, torch.Generator(), {})
    assert picks != top_sensitive and picks != divprune.indices.tolist()


@pytest.mark.parametrize("n", [1, 3, 16, 100])
@pytest.mark.parametrize("budget", [0.05, 0.056, 0.1, 0.111, 0.2, 0.5, 1.0])
def test_exactly_k_tokens_through_the_registry(n, budget):
    image = zoo_image(n, n)
    selection = select_tokens("zoo_prune", image, torch.zeros(1, 6), budget, torch.Generator(), PARAMS)
    want = sorted(brute_force(image.embeds, image.merger_sensitivity, tokens_to_keep(budget, n)))
    assert selection.indices.tolist() == want
    assert torch.equal(selection.embeds, image.embeds[selection.indices])


def test_near_duplicate_tokens_still_give_k():
    """Zero distances make every remaining score 0: the lowest unpicked index fills, k is still met."""
    embeds = torch.ones(10, 6)
    image = ImageTokens(embeds, (1, 2, 5), torch.rand(10), torch.randn(10, 4), merger_sensitivity=torch.rand(10))
    selection = select_tokens("zoo_prune", image, torch.zeros(1, 6), 0.7, torch.Generator(), PARAMS)
    assert selection.indices.numel() == 7


def test_selection_is_prompt_only():
    image = zoo_image(30, 2)
    picks = {
        tuple(select_tokens("zoo_prune", image, q, 0.2, torch.Generator().manual_seed(s), PARAMS).indices.tolist())
        for s, q in enumerate([torch.zeros(1, 6), torch.randn(5, 6), torch.randn(2, 6) * 50])
    }
    assert len(picks) == 1


def test_declared_probe_follows_params_and_run_seed():
    got = declared_signals("zoo_prune", {"probes": 8, "step": 0.05}, seed=3)
    assert got == VisionSignals(merger_probe=MergerProbe(8, 0.05, derive_seed(3, "zoo_prune")))
    assert declared_signals("zoo_prune", PARAMS, seed=4) != declared_signals("zoo_prune", PARAMS, seed=3)
    image = zoo_image(5, 0)
    image.merger_sensitivity = None
    with pytest.raises(ValueError, match=r"merger_sensitivity.*declared_signals\('zoo_prune'"):
        select_tokens("zoo_prune", image, torch.zeros(1, 6), 0.5, torch.Generator(), PARAMS)


@pytest.mark.parametrize(
    "params, pattern",
    [
        ({"probes": 0, "step": 0.01}, r"pruner\.params\.probes=0 must be an integer >= 1"),
        ({"probes": 2.5, "step": 0.01}, r"pruner\.params\.probes=2\.5 must be an integer >= 1"),
        ({"probes": 64, "step": 0.0}, r"pruner\.params\.step=0\.0 must be a finite number > 0"),
        ({"probes": 64, "step": float("inf")}, r"pruner\.params\.step=inf must be a finite number > 0"),
        ({"probes": 64, "step": "0.01"}, r"pruner\.params\.step='0\.01' must be a finite number > 0"),
    ],
)
def test_bad_params_are_config_errors_naming_key_and_range(params, pattern):
    """Raised by the config itself (PrunerConfig), before any model loads."""
    with pytest.raises(ValueError, match=pattern):
        PrunerConfig(name="zoo_prune", stage="pre_llm", params=params)
