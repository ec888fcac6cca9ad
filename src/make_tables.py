"""Renders one study's tables and figures: compose ``conf/make_tables.yaml``, then ``sparsectx.report.study.run``.

    python src/make_tables.py experiment=tiny
    python src/make_tables.py experiment=scopd_qwen2_5_vl_7b results_root=/scratch/results logger=none

Writes ``<results_root>/<experiment>/tables/`` (the Snakemake rule ``make_tables``' output). Tests call
``run(cfg)`` with a config from Hydra's compose API.
"""

from __future__ import annotations

from omegaconf import DictConfig

from sparsectx.cli import config_check, entry


@entry("make_tables", study_names=True)  # experiment=<any name> tables that study (sparsectx.cli)
def main(cfg: DictConfig) -> None:
    """Returns None after validating the composed config and writing every table and figure."""
    from sparsectx.report.study import load_tables_config, run  # imported here: --help and --cfg skip it

    with config_check():  # a bad config is answered in one line (exit 2) before any result is read
        load_tables_config(cfg)
    for path in run(cfg):
        print(path)


if __name__ == "__main__":
    main()
