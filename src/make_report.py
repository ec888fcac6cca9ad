"""Builds one study's W&B Report: compose ``conf/make_report.yaml``, then ``sparsectx.report.wandb_report.run``.

    python src/make_report.py experiment=tiny                      # offline: writes the report definition
    python src/make_report.py experiment=tiny logger.mode=online   # publishes it (after `wandb sync`)

Run it after ``make_tables.py`` (the report shows the tables and plots that run logged). Tests call
``run(cfg)`` with a config from Hydra's compose API.
"""

from __future__ import annotations

from omegaconf import DictConfig

from sparsectx.cli import config_check, entry


@entry("make_report")
def main(cfg: DictConfig) -> None:
    """Returns None after validating the config and publishing the report or writing its definition."""
    from sparsectx.report.wandb_report import load_report_config, run

    with config_check():  # a bad config is answered in one line (exit 2) before anything is read
        load_report_config(cfg)
    run(cfg)


if __name__ == "__main__":
    main()
