"""VLMEvalKit's own ``run.py`` (``python -m vlmeval.run``) evaluates the shipped tiny model through ``SparsectxVLM``,
offline, on local TSVs, and gives ``evaluate.py``'s score and answers on the same items (greedy, same prompt).

Runs in VLMEvalKit's environment (``make vlmeval-env``, which also installs the hook that registers the model:
``sparsectx.integrations.vlmeval_register``; skipped with that command when the environment is absent). The
model is selected both ways VLMEvalKit documents: ``--config`` with ``"class": "SparsectxVLM"`` (a class of
``vlmeval.vlm``), and ``--model <name>`` with the name from ``$SPARSECTX_VLMEVAL_MODELS`` (an entry of
``supported_VLM``). The datasets are custom ones (``$LMUData/TinyMCQ.tsv``, ``TinyMulti.tsv`` with rows of 2
and 3 images, read by VLMEvalKit's ``CustomMCQDataset``, exact matching); the project side scores the same
files with ``mcq_vlmeval`` (VLMEvalKit's exact-matching MCQ rules).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
from pathlib import Path

import pytest

from sparsectx.eval.runner import run
from sparsectx.integrations.vlmeval_register import MODEL_ARGUMENTS, MODELS_VARIABLE, PTH_NAME
from sparsectx.paths import predictions_path

from .test_harness_model import OVERRIDES, mcq_tsv
from .test_lmms_eval_adapter import multi_image_tsv
from .test_runner_support import compose_eval
from .vlmeval_cases import REPO, require_vlmeval_env

READ_XLSX = "import sys, pandas; d = pandas.read_excel(sys.argv[1]); print(d[['index', 'prediction']].to_json())"
SIGNATURE = (
    "import inspect; from sparsectx.integrations.vlmeval_model import SparsectxVLM; "
    "print(list(inspect.signature(SparsectxVLM).parameters))"
)


def _with_image_paths(tsv: Path) -> Path:
    """Returns ``tsv`` with an ``image_path`` column naming each image of a multi-image row, as VLMEvalKit's
    multi-image files have (vlmeval/dataset/image_base.py ``dump_image`` names the dumped files by it)."""
    csv.field_size_limit(2**31 - 1)
    with open(tsv, encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    for row in rows:
        row["image_path"] = str([f"{row['index']}_{n}.png" for n in range(len(json.loads(row["image"])))])
    with open(tsv, "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]), delimiter="\t", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return tsv


def _evaluate(tsv: Path, results: Path) -> tuple[float, dict[str, dict[str, str]]]:
    """Returns ``evaluate.py``'s score on ``tsv`` and its prediction rows by id."""
    (result,) = run(compose_eval([*OVERRIDES, f"bench.syn_mcq.path={tsv}", "logger=none", f"results_root={results}"]))
    rows = predictions_path(result.parent, "syn_mcq").read_text().splitlines()
    return json.loads(result.read_text())["score"], {r["id"]: r for r in map(json.loads, rows)}


def _run_py(env: Path, cwd: Path, args: list[str], extra_env: dict[str, str]) -> str:
    """Returns the end of the console output of VLMEvalKit's ``run.py`` (``python -m vlmeval.run``) run in ``cwd``;
    fails with it if the command fails."""
    command = [str(env / "bin" / "python"), "-m", "vlmeval.run", *args, "--judge", "exact_matching"]
    done = subprocess.run(
        command, cwd=cwd, env={**os.environ, **extra_env}, capture_output=True, text=True, timeout=1200, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return (done.stdout + done.stderr)[-3000:]


def _predictions(env: Path, xlsx: Path, log: str) -> dict[str, str]:
    """Returns index -> prediction of a prediction file ``run.py`` wrote (read with the environment's pandas)."""
    assert xlsx.is_file(), f"{xlsx} is missing (run.py exits 0 when a model x dataset pair fails):\n{log}"
    read = [str(env / "bin" / "python"), "-c", READ_XLSX, str(xlsx)]
    table = json.loads(subprocess.run(read, cwd=REPO, capture_output=True, text=True, check=True).stdout)
    return {str(table["index"][k]): table["prediction"][k] or "" for k in table["index"]}


@pytest.mark.slow
def test_vlmeval_run_py_selects_the_model_by_config_class_and_by_name(tmp_path: Path) -> None:
    env = require_vlmeval_env()
    where = [str(env / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
    purelib = subprocess.run(where, capture_output=True, text=True, check=True).stdout.strip()
    assert (Path(purelib) / PTH_NAME).is_file(), f"{env} lacks the sparsectx hook: rebuild it with `make vlmeval-env`"
    signature = subprocess.run(
        [str(env / "bin" / "python"), "-c", SIGNATURE], capture_output=True, text=True, check=False
    )
    assert signature.stdout.strip() == str([*MODEL_ARGUMENTS, "kwargs"]), signature.stderr[-2000:]
    lmu = tmp_path / "LMUData"
    lmu.mkdir()
    single = mcq_tsv(lmu / "TinyMCQ.tsv", 8)
    multi = _with_image_paths(multi_image_tsv(lmu / "TinyMulti.tsv", single, 5))
    score, single_rows = _evaluate(single, tmp_path / "res1")
    _, multi_rows = _evaluate(multi, tmp_path / "res2")

    config = {
        "model": {"sparsectx_tiny": {"class": "SparsectxVLM", "bench": "syn_mcq", "overrides": OVERRIDES}},
        "data": {"TinyMCQ": {"class": "CustomMCQDataset", "dataset": "TinyMCQ"}},
    }
    (tmp_path / "cfg.json").write_text(json.dumps(config))
    log = _run_py(
        env, tmp_path, ["--config", str(tmp_path / "cfg.json"), "--work-dir", "by_class"], {"LMUData": str(lmu)}
    )
    with open(tmp_path / "by_class" / "sparsectx_tiny" / "sparsectx_tiny_TinyMCQ_acc.csv", encoding="utf-8") as f:
        (row,) = list(csv.DictReader(f))
    assert 100 * float(row["Overall"]) == pytest.approx(score, abs=1e-9)
    assert 0 < score < 100  # the items are not all answered alike
    by_class = _predictions(env, tmp_path / "by_class" / "sparsectx_tiny" / "sparsectx_tiny_TinyMCQ.xlsx", log)
    assert by_class == {i: r["answer"] or "" for i, r in single_rows.items()}

    models = {"sparsectx_raw": {"bench": "syn_mcq", "overrides": OVERRIDES, "return_output": True}}
    (tmp_path / "models.json").write_text(json.dumps(models))
    names = {"LMUData": str(lmu), MODELS_VARIABLE: str(tmp_path / "models.json")}
    log = _run_py(env, tmp_path, ["--model", "sparsectx_raw", "--data", "TinyMulti", "--work-dir", "by_name"], names)
    by_name = _predictions(env, tmp_path / "by_name" / "sparsectx_raw" / "sparsectx_raw_TinyMulti.xlsx", log)
    assert by_name == {i: r["output"] for i, r in multi_rows.items()}  # every image of each row reached the model
