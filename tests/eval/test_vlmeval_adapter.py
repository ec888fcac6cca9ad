"""VLMEvalKit's ``run.py --config`` evaluates the shipped tiny model through ``SparsectxVLM``, offline, on a
local TSV, and gives ``evaluate.py``'s score on the same items (greedy, same prompt), item by item.

Runs in VLMEvalKit's environment (``make vlmeval-env``; skipped with that message when absent). The dataset
is a custom one (``$LMUData/TinyMCQ.tsv``, read by VLMEvalKit's ``CustomMCQDataset``, exact matching), the
project side scores the same file with ``mcq_vlmeval`` (VLMEvalKit's exact-matching MCQ rules).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
from pathlib import Path

import pytest

from sparsectx.eval.runner import run
from sparsectx.paths import predictions_path

from .test_harness_model import OVERRIDES, mcq_tsv
from .test_runner_support import compose_eval
from .vlmeval_cases import REPO, require_vlmeval_env

READ_XLSX = (
    "import sys, pandas; d = pandas.read_excel(sys.argv[1]); print(d[['index', 'prediction']].to_json())"
)


@pytest.mark.slow
def test_vlmeval_run_py_scores_the_tiny_model_as_evaluate_does(tmp_path: Path) -> None:
    env = require_vlmeval_env()
    lmu = tmp_path / "LMUData"
    lmu.mkdir()
    tsv = mcq_tsv(lmu / "TinyMCQ.tsv", 8)
    (result,) = run(
        compose_eval(
            [*OVERRIDES, f"bench.syn_mcq.path={tsv}", "logger=none", f"results_root={tmp_path / 'res'}"]
        )
    )
    mine = json.loads(result.read_text())
    rows = predictions_path(result.parent, "syn_mcq").read_text().splitlines()
    answers = {r["id"]: r["answer"] or "" for r in map(json.loads, rows)}
    config = {
        "model": {"sparsectx_tiny": {"class": "SparsectxVLM", "bench": "syn_mcq", "overrides": OVERRIDES}},
        "data": {"TinyMCQ": {"class": "CustomMCQDataset", "dataset": "TinyMCQ"}},
    }
    (tmp_path / "cfg.json").write_text(json.dumps(config))
    work = tmp_path / "work"
    command = [
        str(env / "bin" / "python"), "-m", "sparsectx.integrations.vlmeval_model", "--config",
        str(tmp_path / "cfg.json"), "--judge", "exact_matching", "--work-dir", str(work),
    ]  # fmt: skip
    done = subprocess.run(
        command, cwd=tmp_path, env={**os.environ, "LMUData": str(lmu)}, capture_output=True, text=True,
        timeout=1200, check=False,
    )  # fmt: skip
    scores = work / "sparsectx_tiny" / "sparsectx_tiny_TinyMCQ_acc.csv"
    assert done.returncode == 0 and scores.is_file(), done.stderr[-3000:]  # run.py exits 0 on a failed pair
    with open(scores, encoding="utf-8") as handle:
        (row,) = list(csv.DictReader(handle))
    assert 100 * float(row["Overall"]) == pytest.approx(mine["score"], abs=1e-9)
    assert 0 < mine["score"] < 100  # the items are not all answered alike
    preds = work / "sparsectx_tiny" / "sparsectx_tiny_TinyMCQ.xlsx"
    table = json.loads(subprocess.run([str(env / "bin" / "python"), "-c", READ_XLSX, str(preds)], cwd=REPO,
                                      capture_output=True, text=True, check=True).stdout)  # fmt: skip
    theirs = {str(table["index"][k]): table["prediction"][k] or "" for k in table["index"]}
    assert theirs == answers
