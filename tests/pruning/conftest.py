"""Shared fixtures for the pruning tests: random images, the shipped pruner configs, and a folder of operator
modules searched as part of ``sparsectx.pruning`` (a newcomer's module beside the shipped ones)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
import yaml
from component_folders import component_folder

import sparsectx.pruning as pruning
from sparsectx.pruning import PRUNERS
from sparsectx.visual import ImageTokens

CONF_DIR = Path(__file__).resolve().parents[2] / "conf" / "pruner"


def random_image(
    n: int, d: int = 8, d_head: int = 4, levels: int = 2, seed: int = 0, dtype: torch.dtype = torch.float32
) -> ImageTokens:
    """Returns an image of n tokens with Gaussian embeds/keys/DeepStack levels, uniform attention (last and
    object block) and uniform merger sensitivity."""
    g = torch.Generator().manual_seed(seed)
    image = ImageTokens(
        embeds=torch.randn(n, d, generator=g, dtype=torch.float64).to(dtype),
        grid=(1, 1, n),
        attention_received=torch.rand(n, generator=g, dtype=torch.float64).float(),
        keys=torch.randn(n, d_head, generator=g, dtype=torch.float64).float(),
        deepstack=tuple(torch.randn(n, d, generator=g, dtype=torch.float64).to(dtype) for _ in range(levels)),
    )
    image.object_attention = torch.rand(n, generator=g, dtype=torch.float64).float()
    image.merger_sensitivity = torch.rand(n, generator=g, dtype=torch.float64).float()
    return image


@pytest.fixture
def make_image() -> Callable[..., ImageTokens]:
    """Returns the ``random_image`` factory."""
    return random_image


@pytest.fixture(scope="session")
def pruner_confs() -> dict[str, dict]:
    """Returns every ``conf/pruner/*.yaml`` parsed, keyed by file stem."""
    return {path.stem: yaml.safe_load(path.read_text()) for path in sorted(CONF_DIR.glob("*.yaml"))}


@pytest.fixture
def operator_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str, str], Path]]:
    """Returns ``write(module, source)``, which writes ``<module>.py`` into a folder that ``sparsectx.pruning``
    searches after its own, as if the file were put beside the shipped operators; then
    ``pruning.register_operators()`` finds it (``component_folder``)."""
    yield from component_folder(tmp_path / "operators", monkeypatch, pruning, PRUNERS)
