"""Train one method at one budget: compose ``conf/train.yaml``, then ``sparsectx.training.loop.run``.

    python src/train.py seed=0
    python src/train.py method=scopd_plus seed=0 budget=0.1
    accelerate launch --num_processes 4 src/train.py method=scopd model=qwen2_5_vl_7b seed=0

Rerunning the same command resumes from ``<run_dir>/state``. Tests call ``run(cfg)`` with a config from
Hydra's compose API.
"""

from __future__ import annotations

import logging

import hydra
from omegaconf import DictConfig

from sparsectx.training.loop import run

log = logging.getLogger(__name__)


@hydra.main(version_base=None, config_path="../conf", config_name="train")
def main(cfg: DictConfig) -> None:
    """Returns None after training (or resuming) the configured run."""
    result = run(cfg)
    log.info(
        "finished %d steps (%d samples); model at %s", result.steps, result.samples_seen, result.checkpoint
    )


if __name__ == "__main__":
    main()
