"""The scores ``python src/evaluate.py`` measured on a run's merged checkpoint, for its model card.

``evaluate.py checkpoint=<run_dir>/checkpoint`` writes ``<results_root>/<experiment>/<model>/<method>/<pruner>/
<budget>/<benchmark>.json``: its method folder is named by the checkpoint's record (``eval.trained.leaf_method``, the
run tag included), its experiment and model by the evaluation's own config (``experiment=dev`` unless given), and
every result records the identity of the weights it read (``model.checkpoint_id``, ``loading.snapshot_identity``;
``eval.checkpoints.eval_model_info``). So the card takes, from every experiment under ``results_root``, the results
of the checkpoint's method folder measured on this very checkpoint: at the pruner and budget it was trained for and
at any other (the same model evaluated under another pruner or budget), one per benchmark, pruner and budget (the
run's own experiment first). A result at the trained pruner and budget measured on other weights (an earlier
training of the same run directory) is left out, with a warning naming it.
"""

from __future__ import annotations

import logging
from pathlib import Path

from sparsectx.eval.trained import leaf_method, training_record
from sparsectx.io import read_json_object
from sparsectx.models.loading import snapshot_identity
from sparsectx.paths import BASE, result_path
from sparsectx.report.collect import RERUN_FIX, cell_leaf, read_result
from sparsectx.report.discover import discover
from sparsectx.training.model_card import Evaluation

log = logging.getLogger(__name__)


def checkpoint_evaluations(results_root: str | Path, checkpoint: Path) -> list[Evaluation]:
    """Returns the scores measured on the merged checkpoint ``checkpoint`` (``<run_dir>/checkpoint``) under
    ``results_root``; none when it was not evaluated yet.

    Raises:
        ValueError: a result file of the checkpoint's method folder is unreadable or not the result its path names
            (naming it and the fix: ``report.collect.read_result``).
    """
    record = training_record(checkpoint)
    if record is None or record["method"] is None:
        log.warning(
            "%s has no training record with its run's config.yaml beside it: its results leaf is unknown, so the "
            "card gets no evaluation table",
            checkpoint,
        )
        return []
    method = leaf_method(BASE, checkpoint)  # the folder evaluate.py writes this checkpoint's results into
    identity = snapshot_identity(checkpoint)
    root = Path(results_root)
    studies = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    found: dict[tuple[str, str, float], Evaluation] = {}
    for experiment in sorted(studies, key=lambda name: name != record["experiment"]):  # the run's own first
        for cell in discover(root, experiment).results:
            if cell.method != method:
                continue
            path = result_path(cell_leaf(root, experiment, cell), cell.bench)
            payload = read_json_object(path, RERUN_FIX)
            measured_on = (payload.get("model") or {}).get("checkpoint_id")
            if measured_on != identity:
                if (cell.pruner, cell.budget) == (record["pruner"], record["budget"]):
                    log.warning(
                        "%s was measured on another checkpoint (%s; %s is %s): left out of the card; rerun its "
                        "evaluation (python src/evaluate.py checkpoint=%s ...) to score this one",
                        path,
                        measured_on,
                        checkpoint,
                        identity,
                        checkpoint,
                    )
                continue
            score = read_result(path, cell)["score"]  # checked: a BenchResult of the cell its path names
            dataset, scorer, items = payload["dataset_name"], payload["scorer"], payload["n_scored"]
            found.setdefault(
                (cell.bench, cell.pruner, cell.budget),
                Evaluation(cell.bench, dataset, scorer, score, cell.pruner, cell.budget, items),
            )
    return sorted(found.values(), key=lambda row: row.benchmark)
