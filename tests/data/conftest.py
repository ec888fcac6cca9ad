"""Small synthetic suites built once per session from the real conf/ files (only sizes shrunk)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from sparsectx.data.build import load_build_config
from sparsectx.data.config import SuiteConfig
from sparsectx.data.synthetic import SuiteReport, build_suite

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
BENCHES = ("syn_detail", "syn_count", "syn_spatial", "syn_ocr", "syn_pope", "syn_mcq")
SMALL_BENCH = 12  # a multiple of every balanced design's period (2, 4, 6, 12)
SMALL_TRAIN = 40


def compose_build(overrides: list[str]) -> DictConfig:
    """Returns conf/build_data.yaml composed with ``overrides``."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose(config_name="build_data", overrides=overrides)


def small_overrides(out_dir: Path, seed: int) -> list[str]:
    """Returns overrides that shrink every split and write to ``out_dir`` (processor off)."""
    sizes = [f"data.benches.{bench}.size={SMALL_BENCH}" for bench in BENCHES]
    return [
        f"data.out_dir={out_dir}",
        f"data.seed={seed}",
        f"data.train.size={SMALL_TRAIN}",
        "processor.write=false",
        *sizes,
    ]


def small_suite_config(out_dir: Path, seed: int) -> SuiteConfig:
    """Returns the checked data config of a small suite."""
    return load_build_config(compose_build(small_overrides(out_dir, seed))).data


@pytest.fixture(scope="session")
def small_suite(tmp_path_factory: pytest.TempPathFactory) -> tuple[SuiteConfig, SuiteReport]:
    """Returns the config and report of a small suite (seed 0) written to a temporary folder."""
    cfg = small_suite_config(tmp_path_factory.mktemp("suite_seed0"), 0)
    return cfg, build_suite(cfg)
