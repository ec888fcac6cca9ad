"""Checks a model's checkpoint folder and a benchmark suite's files in seconds, before any GPU job.

    python src/preflight.py model=qwen2_5_vl_7b model.path=/models/Qwen2.5-VL-7B-Instruct bench=scopd13
    python src/preflight.py experiment=scopd_qwen2_5_vl_7b            # every input of a study preset
    python src/preflight.py experiment=scopd_qwen2_5_vl_7b --list     # what it needs and how to get it

``--list`` is ``list=true`` (Hydra takes key=value; the flag is rewritten before it parses). Prints one line per
problem and a summary, exits 1 on any problem (``sparsectx.preflight.run``).
"""

from __future__ import annotations

import sys

from omegaconf import DictConfig

from sparsectx.cli import config_check, entry
from sparsectx.paths import CONF_DIR

PASSED_ON = ("model.", "bench.", "model_paths", "+model_paths", "sample_image", "train_")
"""The caller's overrides kept when another model or the preset's suite is composed."""


@entry("preflight")
def main(cfg: DictConfig) -> None:
    """Returns None after the preflight passed; exits with status 1 when it found a problem."""
    from hydra import compose
    from hydra.core.hydra_config import HydraConfig

    from sparsectx.preflight import run  # imported here: --help and --cfg skip torch
    from sparsectx.preflight.run import load_preflight_config

    with config_check():  # a bad config is answered in one line (exit 2) before any input is read
        load_preflight_config(cfg)
    given = [o for o in HydraConfig.get().overrides.task if o.startswith(PASSED_ON)]
    status = run(cfg, lambda extra: compose("preflight", overrides=[*given, *extra]), CONF_DIR)
    if status:
        sys.exit(status)


if __name__ == "__main__":
    sys.argv = [("list=true" if arg == "--list" else arg) for arg in sys.argv]
    main()
