"""The plan's own settings (``conf/plan.yaml`` with ``key=value`` overrides) and the GPU memory a profile declares."""

from __future__ import annotations

from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

from sparsectx.workflow.config import CONF_DIR, REPO_DIR

PLAN_CONFIG = Path(CONF_DIR) / "plan.yaml"


def load_plan_config(overrides: list[str] | None = None) -> DictConfig:
    """Returns conf/plan.yaml with ``overrides`` (``key=value``; an unknown key is an error naming it).

    ``gpu_mem_gb`` comes from the command line if given there, else from the profile's ``default-resources``
    (``profile``), else from conf/plan.yaml.
    """
    cfg = OmegaConf.load(PLAN_CONFIG)
    OmegaConf.set_struct(cfg, True)
    given = list(overrides or [])
    cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(given))
    if not any(o.split("=", 1)[0] == "gpu_mem_gb" for o in given):
        declared = profile_gpu_memory(REPO_DIR / cfg.profile)
        if declared is not None:
            cfg.gpu_mem_gb = declared
    return cfg


def profile_gpu_memory(path: Path) -> float | None:
    """Returns ``default-resources: gpu_mem_gb`` of a Snakemake profile's config.yaml, or None if it has none."""
    if not path.is_file():
        return None
    resources = (yaml.safe_load(path.read_text()) or {}).get("default-resources") or {}
    value = resources.get("gpu_mem_gb")
    return None if value is None else float(value)
