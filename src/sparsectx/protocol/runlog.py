"""A run's departures from its paper, for its log: the settings the paper states that the run sets otherwise."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from sparsectx.protocol.leaves import stage_leaves
from sparsectx.protocol.record import deviations, protocol_of

PROTOCOL_STAGES = {"greedy": "evaluate", "passk": "passk", "efficiency": "efficiency"}
"""``evaluate.py``'s mode -> the protocol stage its settings belong to."""


def run_deviations(cfg: Any, stage: str) -> list[str]:
    """Returns one line per setting of a composed ``train.py``/``evaluate.py`` config that differs from what the
    paper of its experiment preset states ([] for a run outside a paper's presets)."""
    if not isinstance(cfg, DictConfig) or cfg.get("grid") is None:
        return []
    protocol = protocol_of(str(cfg.experiment))
    if protocol is None:
        return []
    return deviations(protocol, stage, stage_leaves(stage, cfg), str(cfg.method.name), str(cfg.model.name))
