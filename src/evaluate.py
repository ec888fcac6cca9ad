"""Evaluates one model x pruner x budget: benchmark scores, fixed-context Pass@K, or efficiency.

    python src/evaluate.py model=tiny pruner=visionzip budget=0.1 bench=synthetic
    python src/evaluate.py checkpoint=<trained dir> budget=0.1      # replaces model.path; its record names the method
    python src/evaluate.py mode=passk budget=0.1 passk.full_context_leaf=results/dev/tiny/base/visionzip/1
    python src/evaluate.py mode=efficiency model.path=<dir with config.json, no weights> model.device=cuda
    python src/evaluate.py shard.count=2 shard.index=0   # and index 1; then shard.count=2 shard.merge=true

Tests call ``sparsectx.eval.runner.run(cfg)`` with a config from Hydra's compose API.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from sparsectx.cli import config_check, entry
from sparsectx.eval.trained import leaf_method
from sparsectx.paths import budget_tag, path_name

# hydra.run.dir spells the budget as the results leaf does (0.1 -> "0.1", 1.0 -> "1").
OmegaConf.register_new_resolver("budget_tag", budget_tag, replace=True)  # names a non-numeric budget
# The method folder of hydra.run.dir: a trained checkpoint's record names it (a conflicting method= raises).
OmegaConf.register_new_resolver("leaf_method", leaf_method, replace=True)
# Each name in hydra.run.dir passes path_name first: Hydra creates that folder before main() runs.
OmegaConf.register_new_resolver("path_name", path_name, replace=True)


@entry("evaluate", study_names=True)  # experiment=<any name> names the study (sparsectx.cli)
def main(cfg: DictConfig) -> None:
    """Returns None after validating the config, running the evaluation and logging its score summary.

    The summary (one line per output: benchmark, metric, score, items scored / skipped, path) goes through
    ``logging``, so Hydra prints it on stdout and writes it to the run's log file (``evaluate.log``).
    """
    import logging

    from sparsectx.eval.config import load_eval_config  # imported here: --help and --cfg skip torch
    from sparsectx.eval.runner import format_summary, run

    with config_check():  # a bad config is answered in one line (exit 2) before anything is loaded
        load_eval_config(cfg)
    logging.getLogger("evaluate").info("score summary:\n%s", format_summary(run(cfg)))


if __name__ == "__main__":
    main()
