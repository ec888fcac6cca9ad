"""DART's selection rule against a float64 brute force (Python lists), its edge cases and config errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from sparsectx.budget import tokens_to_keep
from sparsectx.layer_selection import ImageSignals
from sparsectx.pruning.config import PrunerConfig
from sparsectx.pruning.dart import select_dart

from .conftest import CONF_DIR


def signals(n: int, text: int, seed: int, duplicates: bool = False) -> ImageSignals:
    """Returns random layer signals: n image tokens (some exact duplicates if asked), ``text`` text tokens."""
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, 5, generator=g, dtype=torch.float64)
    if duplicates and n > 3:
        hidden[1::3] = hidden[0]
    return ImageSignals(
        torch.rand(n, generator=g),
        torch.randn(n, 6, generator=g, dtype=torch.float64).float(),
        hidden.float(),
        torch.randn(text, 6, generator=g, dtype=torch.float64).float(),
        torch.randn(text, 5, generator=g, dtype=torch.float64).float(),
    )


def brute_force(sig: ImageSignals, k: int, pivot_image: int, pivot_text: int) -> list[int]:
    """Float64 DART: pivots by descending L1 key norm, then per pivot the least-cosine remaining tokens."""
    keys, text_keys = sig.keys.double().tolist(), sig.text_keys.double().tolist()
    l1 = lambda rows: [sum(abs(v) for v in row) for row in rows]  # noqa: E731
    norms, text_norms = l1(keys), l1(text_keys)
    image_pivots = sorted(range(len(norms)), key=lambda i: (-norms[i], i))[: min(pivot_image, k)]
    text_pivots = sorted(range(len(text_norms)), key=lambda i: (-text_norms[i], i))[:pivot_text]
    hidden, text_hidden = sig.hidden.double(), sig.text_hidden.double()
    pivots = [hidden[i] for i in image_pivots] + [text_hidden[i] for i in text_pivots]
    kept, needed = set(image_pivots), k - len(image_pivots)
    per = -(-needed // len(pivots))
    for vector in pivots:
        take = min(per, needed)
        free = [i for i in range(len(norms)) if i not in kept]
        cos = {i: float(F.cosine_similarity(hidden[i], vector, dim=0)) for i in free}
        kept.update(sorted(free, key=lambda i: (cos[i], i))[:take])
        needed -= take
    return sorted(kept)


@pytest.mark.parametrize("duplicates", [False, True])
@pytest.mark.parametrize("text", [0, 2, 7])
@pytest.mark.parametrize("budget", [0.05, 0.1, 0.2, 0.5, 1.0])
@pytest.mark.parametrize("n", [1, 3, 10, 81])
def test_matches_float64_brute_force(n, budget, text, duplicates):
    sig = signals(n, text, seed=n + text, duplicates=duplicates)
    k = tokens_to_keep(budget, n)
    got = select_dart(sig, k, pivot_image=4, pivot_text=4)
    assert got.tolist() == brute_force(sig, k, 4, 4)
    assert got.numel() == k


def test_least_duplicated_tokens_survive():
    """A token identical to the image pivot is the last one kept; distinct ones go first."""
    hidden = torch.eye(6)[:, :5].clone()
    hidden[5] = hidden[0]  # a duplicate of token 0
    keys = torch.zeros(6, 2)
    keys[0] = 10.0  # token 0 is the pivot
    sig = ImageSignals(torch.zeros(6), keys, hidden, torch.zeros(0, 2), torch.zeros(0, 5))
    assert 5 not in select_dart(sig, 5, pivot_image=1, pivot_text=0).tolist()
    assert select_dart(sig, 6, pivot_image=1, pivot_text=0).tolist() == list(range(6))


def _conf(**params) -> PrunerConfig:
    values = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "dart.yaml"))
    values["params"] = {**values["params"], **params}
    return PrunerConfig(**values)


def test_shipped_config_builds():
    cfg = _conf()
    assert (cfg.stage, cfg.layer, cfg.params) == ("llm", 2, {"pivot_image": 4, "pivot_text": 4})


@pytest.mark.parametrize(("key", "value"), [("pivot_image", 0), ("pivot_text", -1), ("pivot_image", 1.5)])
def test_pivot_counts_out_of_range_name_the_key(key, value):
    with pytest.raises(ValueError, match=rf"pruner.params.{key}={value}"):
        _conf(**{key: value})


def test_unknown_param_is_a_config_error():
    with pytest.raises(KeyError, match="unknown pruner.params.pivots"):
        _conf(pivots=3)
