"""Train one method at one budget: compose ``conf/train.yaml``, then ``sparsectx.training.loop.run``.

    python src/train.py seed=0
    python src/train.py method=scopd_plus seed=0 budget=0.1
    accelerate launch --num_processes 4 src/train.py method=scopd model=qwen2_5_vl_7b seed=0

Rerunning the same command resumes from ``<run_dir>/state``. Tests call ``run(cfg)`` with a config from
Hydra's compose API.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from sparsectx.cli import config_check, entry
from sparsectx.paths import budget_tag, path_name
from sparsectx.run_tags import run_label_resolver

log = logging.getLogger(__name__)
# hydra.run.dir spells the budget as the run directory does; Hydra resolves it before main is called.
OmegaConf.register_new_resolver("budget_tag", budget_tag, replace=True)
# Each name in hydra.run.dir passes path_name first: Hydra creates that folder before main() runs.
OmegaConf.register_new_resolver("path_name", path_name, replace=True)
# The method folder of hydra.run.dir carries the run's tag (sparsectx.run_tags), as the run directory does.
OmegaConf.register_new_resolver("run_label", run_label_resolver, replace=True)


@entry("train", study_names=True)  # experiment=<any name> names the study (sparsectx.cli)
def main(cfg: DictConfig) -> None:
    """Returns None after training (or resuming) the configured run.

    Exits 128 + signal number (130 Ctrl-C, 143 SIGTERM) after a signal stopped it with its state saved; a run
    that refuses to start leaves no run directory (Hydra creates it, with its log, before ``run`` is called).
    """
    # imported here: --help, --cfg and the cheap config checks (sparsectx.cli) skip torch
    from sparsectx.training.config import load_train_config
    from sparsectx.training.loop import TrainingStoppedError, run

    try:
        with config_check():  # a bad config is answered in one line (exit 2); run() checks it again
            load_train_config(cfg)
        result = run(cfg)
    except TrainingStoppedError as stopped:
        log.error("%s", stopped)
        sys.exit(128 + stopped.signum)
    except BaseException:
        hydra_cfg = HydraConfig.get()
        remove_unfilled_run_dir(Path(hydra_cfg.runtime.output_dir), Path(cfg.runs_root), f"{hydra_cfg.job.name}.log")
        raise
    log.info("finished %d steps (%d samples); model at %s", result.steps, result.samples_seen, result.checkpoint)


def remove_unfilled_run_dir(out: Path, root: Path, log_name: str) -> None:
    """Returns None after removing ``out`` if it holds nothing but Hydra's log, and its empty parents below
    ``root``."""
    out, root = out.resolve(), root.resolve()
    if not out.is_dir() or any(path.name != log_name for path in out.iterdir()):
        return
    root_logger = logging.getLogger()
    for handler in list(root_logger.handlers):  # Hydra's file handler writes the log inside ``out``
        if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename).parent == out:
            root_logger.removeHandler(handler)
            handler.close()
    try:  # other processes of a multi-process run may be removing the same directories
        (out / log_name).unlink(missing_ok=True)
        while out != root and root in out.parents and out.is_dir() and not any(out.iterdir()):
            out.rmdir()
            out = out.parent
    except OSError as err:
        log.warning("could not remove the unfilled run directory %s: %s", out, err)


if __name__ == "__main__":
    main()
