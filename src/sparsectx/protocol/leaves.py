"""A composed run config as the protocol settings it holds: dotted keys, grid axes and other stages' keys out."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from sparsectx.dotted import flatten

GRID_AXES = (
    "grid",
    "experiment",
    "seed",
    "budget",
    "pruner",
    "method.name",
    "model.name",
    "checkpoint",
    "mode",
    "results_root",
    "runs_root",
    "bench",
    "data",
)
"""Keys a job's place in the grid sets (the tables' rows and columns), or that name where files go; ``data`` is
the synthetic generator, unused when the preset reads benchmark and training files."""

STAGE_PREFIXES = {"evaluate": None, "passk": ("passk.",), "efficiency": ("efficiency.",)}
"""The keys each evaluation stage owns: Pass@K and efficiency their blocks, greedy evaluation the rest."""


def is_axis(key: str) -> bool:
    """Returns whether ``key`` is a grid axis or a file location (not a protocol setting)."""
    return any(key == axis or key.startswith(f"{axis}.") for axis in GRID_AXES)


def stage_leaves(stage: str, cfg: DictConfig) -> dict[str, Any]:
    """Returns the protocol settings of a composed config for ``stage`` (axes and other stages' keys out)."""
    leaves = unused_schedules_out(flatten(OmegaConf.to_container(cfg, resolve=True)))
    owned = STAGE_PREFIXES.get(stage)
    others = tuple(p for s, prefixes in STAGE_PREFIXES.items() if s != stage and prefixes for p in prefixes)
    return {
        key: value
        for key, value in leaves.items()
        if not is_axis(key) and (owned is None or key.startswith(owned)) and not key.startswith(others)
    }


SCHEDULE_PARAMS = "method.schedule.params."


def unused_schedules_out(leaves: dict[str, Any]) -> dict[str, Any]:
    """Returns ``leaves`` without the parameters of budget schedules the run does not use (every schedule's
    parameters are composed; only ``method.schedule.name``'s are read)."""
    used = leaves.get("method.schedule.name")
    if used is None:
        return leaves
    return {
        k: v
        for k, v in leaves.items()
        if not k.startswith(SCHEDULE_PARAMS) or k.startswith(f"{SCHEDULE_PARAMS}{used}.")
    }
