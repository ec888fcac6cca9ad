"""The engine settings of ``conf/engine/default.yaml`` for tests that generate outside a composed config."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from sparsectx.engine import EngineConfig

CONF = Path(__file__).resolve().parents[1] / "conf" / "engine" / "default.yaml"


def default_engine(**overrides: object) -> EngineConfig:
    """Returns the shipped engine config, with ``overrides`` applied."""
    values = OmegaConf.to_container(OmegaConf.load(CONF))
    return EngineConfig(**{**values, **overrides})
