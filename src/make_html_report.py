"""Writes one study as a self-contained HTML report: compose ``conf/make_html_report.yaml``, then
``sparsectx.report.html_report.run``.

    python src/make_html_report.py experiment=tiny_demo                       # results/tiny_demo/report.html
    python src/make_html_report.py experiment=tiny_scopd items_per_benchmark=200 out=/tmp/tiny_scopd.html

Run it after ``make_tables.py`` (the report shows its tables and plots). Tests call ``run(cfg)`` with a config
from Hydra's compose API.
"""

from __future__ import annotations

from omegaconf import DictConfig

from sparsectx.cli import config_check, entry


@entry("make_html_report", study_names=True)  # experiment=<any name> reports that study (sparsectx.cli)
def main(cfg: DictConfig) -> None:
    """Returns None after printing the path of the report written."""
    from sparsectx.report.html_report import load_html_report_config, run

    with config_check():  # no results or no tables: answered in one line (exit 2) before anything is written
        load_html_report_config(cfg)
    print(run(cfg))


if __name__ == "__main__":
    main()
