"""Builds one study's W&B Report: compose ``conf/make_report.yaml``, then ``sparsectx.report.wandb_report.run``.

    python src/make_report.py experiment=tiny                      # offline: writes the report definition
    python src/make_report.py experiment=tiny logger.mode=online   # publishes it (after `wandb sync`)

Run it after ``make_tables.py`` (the report shows the tables and plots that run logged). Tests call
``run(cfg)`` with a config from Hydra's compose API.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig


@hydra.main(version_base=None, config_path="../conf", config_name="make_report")
def main(cfg: DictConfig) -> None:
    """Returns None after validating the config and publishing the report or writing its definition."""
    from sparsectx.report.wandb_report import load_report_config, run

    load_report_config(cfg)  # fail on a bad config before anything is read
    run(cfg)


if __name__ == "__main__":
    main()
