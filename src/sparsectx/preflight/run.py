"""The entry point's run: the config, the inputs it names (a model and a suite, or a whole preset), and the
report."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from sparsectx.config_schema import load_config
from sparsectx.eval.config import BenchSpec
from sparsectx.preflight.benchmark import check_benchmark
from sparsectx.preflight.checkpoint import check_checkpoint
from sparsectx.preflight.needs import bench_needs, model_needs, train_needs
from sparsectx.preflight.report import report_json, report_lines
from sparsectx.preflight.training import check_train_file

Compose = Callable[[list[str]], DictConfig]
"""Composes ``conf/preflight.yaml`` with the caller's overrides plus the given ones (``src/preflight.py``)."""


@dataclass
class PreflightConfig:
    """The keys of ``conf/preflight.yaml`` the preflight reads, checked (``load_preflight_config``)."""

    model: Any
    """The ``model`` group (a ``ModelConfig``)."""
    bench: dict[str, BenchSpec]
    list: bool
    models: list[str] | None
    model_paths: dict[str, str] | None
    model_settings: dict[str, dict[str, Any]] | None
    train_files: list[str]
    train_max_skip_fraction: float
    sample_image: list[int]
    max_lines: int
    out: str | None

    def __post_init__(self) -> None:
        if len(self.sample_image) != 2 or min(self.sample_image) < 1:
            raise ValueError(f"sample_image={list(self.sample_image)} must be [width, height], both >= 1")
        if self.max_lines < 1:
            raise ValueError(f"max_lines={self.max_lines} must be >= 1")
        if not 0.0 <= self.train_max_skip_fraction < 1.0:
            raise ValueError(f"train_max_skip_fraction={self.train_max_skip_fraction} must lie in [0, 1)")


def load_preflight_config(cfg: DictConfig) -> PreflightConfig:
    """Returns the checked config; a mistyped key raises naming it. Keys the preflight does not read (a
    model's ``conf/model/scale/evaluate`` file also sets Pass@K sizes) are left out."""
    from sparsectx.models import ModelConfig

    keys = [name for name in PreflightConfig.__dataclass_fields__ if name != "bench"]
    read = OmegaConf.create({"bench": {}, **{key: cfg[key] for key in keys}})
    checked = load_config(
        PreflightConfig, read, "the preflight config (conf/preflight.yaml)", typed={"model": ModelConfig}
    )
    checked.bench = {name: bench_spec_from_node(node) for name, node in cfg.bench.items()}
    return checked


def bench_spec_from_node(node: DictConfig) -> BenchSpec:
    """Returns the checked ``BenchSpec`` of a composed ``bench.<name>`` node."""
    from sparsectx.eval.config import bench_spec_from

    return bench_spec_from(OmegaConf.to_container(node, resolve=True))


def model_config(
    node: DictConfig, name: str, paths: dict[str, str], settings: dict[str, dict[str, Any]] | None = None
) -> Any:
    """Returns the checked ``ModelConfig`` of a composed ``model`` node, with ``settings[name]`` (the ``model.*``
    keys a grid sets for that model alone) merged in and its path replaced by ``paths[name]``."""
    from sparsectx.models import ModelConfig

    own = (settings or {}).get(name) or {}
    given = OmegaConf.merge(OmegaConf.create(OmegaConf.to_container(node, resolve=False)), own)
    model = load_config(ModelConfig, given, f"the model config of {name}")
    if name in paths:
        model.path = str(paths[name])
    return model


def grid_entries(grid: DictConfig | None, key: str) -> list[str] | None:
    """Returns the supported entries of ``grid.<key>`` (models, benchmarks), None without a grid."""
    if grid is None:
        return None
    return [name for name, spec in grid[key].items() if not (spec or {}).get("unsupported")]


def grid_train_files(grid: DictConfig | None) -> list[str]:
    """Returns the ``train_data.path`` the grid's train stage sets ([] when it sets none or has no methods)."""
    if grid is None or not grid.get("methods"):
        return []
    paths = [o.split("=", 1)[1] for o in grid.overrides.get("train", []) if o.startswith("train_data.path=")]
    return paths[-1:]


@dataclass
class Targets:
    """What one preflight call looks at."""

    models: list[tuple[str, Any]]
    """(model preset name, ``ModelConfig``) per checkpoint."""
    benches: dict[str, BenchSpec]
    train_files: list[str]


def targets(cfg: DictConfig, compose: Compose) -> Targets:
    """Returns the checkpoints, benchmarks and training files ``cfg`` names.

    ``models`` (a list of ``conf/model`` names) checks each, else the ``model`` group's one; an experiment
    preset (``experiment=<preset>``, whose ``grid`` is set) with ``models`` unset checks its grid's supported
    models and benchmarks and the training file its train stage reads. ``train_files`` adds training files.
    """
    paths = {str(k): str(v) for k, v in (cfg.model_paths or {}).items()}
    settings = OmegaConf.to_container(cfg.model_settings) if cfg.model_settings else {}
    names = list(cfg.models) if cfg.models is not None else grid_entries(cfg.grid, "models")
    if names is None:
        models = [(cfg.model.name, model_config(cfg.model, cfg.model.name, paths, settings))]
    else:
        models = [(name, model_config(compose([f"model={name}"]).model, name, paths, settings)) for name in names]
    bench_node = cfg.bench
    preset_benches = grid_entries(cfg.grid, "benchmarks") if cfg.models is None else None
    if preset_benches:
        bench_node = compose([f"bench=[{','.join(preset_benches)}]"]).bench
    benches = {name: bench_spec_from_node(node) for name, node in bench_node.items()}
    train = [*(cfg.train_files or []), *(grid_train_files(cfg.grid) if cfg.models is None else [])]
    return Targets(models, benches, list(dict.fromkeys(train)))


def run(cfg: DictConfig, compose: Compose, conf_dir: Path) -> int:
    """Returns the exit status after printing the preflight's report (or with ``list=true`` what the inputs
    need): 0 when every input passed (or for a list), 1 when anything failed. With ``out`` set and every
    input passed, writes the report as JSON there (the DAG's stamp); nothing else is written."""
    start = time.perf_counter()
    load_preflight_config(cfg)  # a mistyped key fails before anything is read
    chosen = targets(cfg, compose)
    if cfg.list:
        needs = [model_needs(name, model.path, model.revision) for name, model in chosen.models]
        needs += [need for spec in chosen.benches.values() for need in bench_needs(spec)]
        needs += [need for path in chosen.train_files for need in train_needs(path, conf_dir)]
        for need in needs:
            print("\n".join(need.lines()))
        missing = sum(not need.present for need in needs)
        print(f"preflight --list: {len(needs)} files and folders needed, {missing} missing here")
        return 0
    size = tuple(cfg.sample_image)
    checks = [check_checkpoint(name, model, size) for name, model in chosen.models]
    checks += [check_benchmark(spec) for spec in chosen.benches.values()]
    checks += [check_train_file(path, cfg.train_max_skip_fraction, conf_dir) for path in chosen.train_files]
    lines = report_lines(checks, cfg.max_lines)
    seconds = time.perf_counter() - start
    print("\n".join(lines[:-1] + [f"{lines[-1]} ({seconds:.1f} s)"]))
    passed = not any(c.problems for c in checks)
    if passed and cfg.out:
        from sparsectx.io import atomic_write_bytes

        atomic_write_bytes(Path(cfg.out), json.dumps(report_json(checks, seconds), indent=2).encode())
    return 0 if passed else 1
