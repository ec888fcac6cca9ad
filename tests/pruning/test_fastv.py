"""FastV's selection rule against a float64 brute force, and its config's bad-input errors."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from sparsectx.budget import tokens_to_keep
from sparsectx.layer_selection import ImageSignals
from sparsectx.pruning.config import PrunerConfig
from sparsectx.pruning.fastv import select_fastv

from .conftest import CONF_DIR


def signals(n: int, seed: int, ties: bool = False) -> ImageSignals:
    """Returns random layer signals of an image of n tokens (attention rounded to force ties if asked)."""
    g = torch.Generator().manual_seed(seed)
    attention = torch.rand(n, generator=g, dtype=torch.float64)
    if ties:
        attention = (attention * 3).floor() / 3
    return ImageSignals(
        attention.float(),
        torch.randn(n, 6, generator=g),
        torch.randn(n, 5, generator=g),
        torch.randn(3, 6, generator=g),
        torch.randn(3, 5, generator=g),
    )


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("budget", [0.05, 0.1, 0.2, 0.5, 1.0])
@pytest.mark.parametrize("n", [1, 2, 9, 64])
def test_matches_float64_brute_force(n, budget, ties):
    sig = signals(n, seed=n, ties=ties)
    k = tokens_to_keep(budget, n)
    score = [float(v) for v in sig.attention.double()]
    expected = sorted(sorted(range(n), key=lambda i: (-score[i], i))[:k])
    assert select_fastv(sig, k).tolist() == expected


def _conf(**overrides) -> PrunerConfig:
    values = {**OmegaConf.to_container(OmegaConf.load(CONF_DIR / "fastv.yaml")), **overrides}
    return PrunerConfig(**values)


def test_shipped_config_builds():
    cfg = _conf()
    assert (cfg.stage, cfg.layer, cfg.params) == ("llm", 2, {})


@pytest.mark.parametrize("layer", [0, -1, None, 1.5])
def test_layer_below_one_is_a_config_error(layer):
    with pytest.raises(ValueError, match=rf"pruner.layer={layer!r}.*integer >= 1"):
        _conf(layer=layer)


def test_layer_at_or_past_the_last_layer_names_the_key_and_range():
    cfg = _conf(layer=4)
    cfg.check_layer(5)
    with pytest.raises(ValueError, match=r"pruner.layer=4 is outside \[1, 3\]"):
        cfg.check_layer(4)


def test_wrong_stage_names_the_key():
    with pytest.raises(ValueError, match="pruner.stage='pre_llm'.*set pruner.stage=llm"):
        _conf(stage="pre_llm")
    with pytest.raises(ValueError, match="pruner.layer=2.*takes no layer"):
        PrunerConfig(name="random", stage="pre_llm", params={}, layer=2)
