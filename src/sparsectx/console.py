"""The console commands ``pip install`` puts on ``PATH`` (``[project.scripts]`` in ``pyproject.toml``): each runs
one entry script of ``src/`` as ``python src/<script>.py`` does, from any folder.

    sparsectx-evaluate model=tiny pruner=visionzip budget=0.1 bench=synthetic   # = python src/evaluate.py ...
    sparsectx-train --config-dir conf experiment=my_study                        # a folder of your own configs

The package ships the scripts as ``sparsectx/scripts/<script>.py`` (in a checkout, links to ``src/<script>.py``;
in a wheel, copies) beside the configs, ``sparsectx/conf``, so each script's ``config_path="../conf"``
(``sparsectx.cli.entry``) finds them. A command runs its script as ``__main__`` (``runpy.run_path``), so the
script's own ``if __name__ == "__main__"`` lines run, Hydra takes the config folder relative to the script's file
and names the job after it (``train.log``), exactly as for ``python src/train.py``.
"""

from __future__ import annotations

import runpy

from sparsectx.paths import PACKAGE_DIR

SCRIPTS_DIR = PACKAGE_DIR / "scripts"
"""The entry scripts the commands run (``sparsectx/scripts/<script>.py``)."""


def run_script(script: str) -> None:
    """Runs ``sparsectx/scripts/<script>.py`` as ``__main__`` with the command's arguments; returns when it does
    (a script that exits raises ``SystemExit`` with its status, which the console wrapper passes on)."""
    runpy.run_path(str(SCRIPTS_DIR / f"{script}.py"), run_name="__main__")


def train() -> None:
    """``sparsectx-train``: ``src/train.py``, one method at one budget."""
    run_script("train")


def evaluate() -> None:
    """``sparsectx-evaluate``: ``src/evaluate.py``, one model x pruner x budget."""
    run_script("evaluate")


def build_data() -> None:
    """``sparsectx-build-data``: ``src/build_data.py``, the synthetic suite and training sets."""
    run_script("build_data")


def export() -> None:
    """``sparsectx-export``: ``src/export.py``, a finished run's model pushed to the Hub or written to a folder."""
    run_script("export")


def make_tables() -> None:
    """``sparsectx-make-tables``: ``src/make_tables.py``, one study's tables and figures."""
    run_script("make_tables")


def make_report() -> None:
    """``sparsectx-make-report``: ``src/make_report.py``, one study's W&B Report."""
    run_script("make_report")


def make_html_report() -> None:
    """``sparsectx-make-html-report``: ``src/make_html_report.py``, one study's report as a self-contained web page."""
    run_script("make_html_report")


def preflight() -> None:
    """``sparsectx-preflight``: ``src/preflight.py``, a checkpoint's and a benchmark suite's files checked."""
    run_script("preflight")


def judge_answers() -> None:
    """``sparsectx-judge-answers``: ``src/judge_answers.py``, a judge for the answers exact matching left open."""
    run_script("judge_answers")


def vlmeval_score() -> None:
    """``sparsectx-vlmeval-score``: ``src/vlmeval_score.py``, a benchmark scored by VLMEvalKit's own code."""
    run_script("vlmeval_score")
