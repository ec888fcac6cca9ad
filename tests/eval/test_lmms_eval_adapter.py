"""lmms-eval's CLI evaluates the shipped tiny model through ``SparsectxLMM`` (model ``sparsectx``, found through
the ``lmms_eval.models`` entry point), offline, on local tasks, with ``evaluate.py``'s score on the same items.

Runs in lmms-eval's environment (``make lmms-env``; skipped with that message when absent). The tasks are
written here (``include_path``): a JSON-lines file of the TSV's rows, ``doc_to_visual`` every image of a row,
``doc_to_text`` the question as the project formats it, ``process_results`` VLMEvalKit's exact-matching MCQ
reading (``mcq_vlmeval``, the scorer ``evaluate.py`` uses on the same file). Item by item, lmms-eval's
logged answers are ``evaluate.py``'s: one request per engine call (``--batch_size 1``), and batched
(``--batch_size 3``, one ``HarnessModel.generate`` call per group of 3) with a multi-image task beside
(MUIRBench/BLINK-style rows of 2 and 3 images, each image reaching the model).
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from sparsectx.data import format_question, read_tsv, write_tsv
from sparsectx.eval.runner import run
from sparsectx.paths import predictions_path

from .test_harness_model import OVERRIDES, mcq_tsv
from .test_runner_support import compose_eval
from .vlmeval_cases import REPO

TASK = """\
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
task: {name}
test_split: test
output_type: generate_until
doc_to_visual: !function sparsectx_tiny_utils.doc_to_visual
doc_to_text: !function sparsectx_tiny_utils.doc_to_text
doc_to_target: answer
generation_kwargs:
  max_new_tokens: 24
process_results: !function sparsectx_tiny_utils.process_results
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
"""
UTILS = """\
import base64, io
from PIL import Image
from sparsectx.eval.scorers import vlmeval_choice

def doc_to_visual(doc):
    return [Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB") for data in doc["images"]]

def doc_to_text(doc, lmms_eval_specific_kwargs=None):
    return doc["text"]

def process_results(doc, results):
    options = {k: v for k, v in doc["options"].items() if v}
    return {"acc": float(vlmeval_choice(results[0], options) == doc["answer"])}
"""
MODEL_ARGS = (
    "model=tiny,pruner=random,budget=0.1,bench=syn_mcq,overrides='bench.syn_mcq.max_new_tokens=24 batch_size=4'"
)
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "disabled"}


def _env() -> Path:
    env = Path(os.environ.get("SPARSECTX_LMMS_ENV", REPO / ".lmms-env"))
    if not (env / "bin" / "lmms-eval").is_file():
        pytest.skip(f"no lmms-eval environment at {env}: build it with `make lmms-env`")
    return env


def _evaluate(tsv: Path, results: Path) -> tuple[float, dict[int, dict[str, str]]]:
    """Returns ``evaluate.py``'s score on ``tsv`` and its prediction rows by item index."""
    cfg = compose_eval([*OVERRIDES, f"bench.syn_mcq.path={tsv}", "logger=none", f"results_root={results}"])
    (result,) = run(cfg)
    rows = predictions_path(result.parent, "syn_mcq").read_text().splitlines()
    return json.loads(result.read_text())["score"], {int(r["id"]): r for r in map(json.loads, rows)}


def _task(tasks: Path, name: str, tsv: Path, hint: str) -> None:
    """Writes lmms-eval task ``name`` over the rows of ``tsv`` (every image of a row, the formatted question)."""
    items, _ = read_tsv(tsv)
    docs = [
        {
            "index": it.index,
            "answer": it.answer,
            "options": it.options,
            "images": [base64.b64encode(data).decode() for data in (it.image_bytes, *it.more_images)],
            "text": format_question(it.question, it.options, hint),
        }
        for it in items
    ]
    data = tasks / f"{name}.jsonl"
    data.write_text("".join(json.dumps(doc) + "\n" for doc in docs))
    (tasks / f"{name}.yaml").write_text(TASK.format(data=data, name=name))
    (tasks / "sparsectx_tiny_utils.py").write_text(UTILS)


def _lmms_eval(env: Path, tmp_path: Path, tasks: list[str], batch_size: int, model_args: str) -> tuple[Path, str]:
    """Returns lmms-eval's results file and console output after `lmms-eval eval --model sparsectx` on ``tasks``."""
    command = [
        str(env / "bin" / "lmms-eval"),
        "eval",
        "--model",
        "sparsectx",
        "--model_args",
        model_args,
        "--tasks",
        ",".join(tasks),
        "--include_path",
        str(tmp_path / "tasks"),
        "--batch_size",
        str(batch_size),
        "--output_path",
        str(tmp_path / "out"),
        "--log_samples",
    ]
    done = subprocess.run(
        command, cwd=tmp_path, env={**os.environ, **OFFLINE}, capture_output=True, text=True, timeout=1200, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = list((tmp_path / "out").rglob("*_results.json"))
    assert len(found) == 1, (done.stdout + done.stderr)[-4000:]  # lmms-eval exits 0 when a task fails to load
    return found[0], done.stdout + done.stderr


def _logged(out: Path, task: str, raw: bool = False) -> dict[int, str]:
    """Returns doc_id -> the response lmms-eval logged for ``task`` (doc_id: the row, = its index here):
    ``filtered_resps`` what the task scored, or (``raw``) the model's text before lmms-eval stripped its
    ``<think>`` block (``--reasoning_tags``' default; lmms_eval/evaluator.py ``_process_document_results``),
    logged as ``resps`` only where the two differ."""
    (samples,) = list(out.parent.rglob(f"*{task}*.jsonl"))
    logged = [json.loads(line) for line in samples.read_text().splitlines()]
    return {s["doc_id"]: s.get("resps", s["filtered_resps"]) if raw else s["filtered_resps"] for s in logged}


def multi_image_tsv(path: Path, single: Path, n: int) -> Path:
    """Returns ``path`` holding ``n`` rows of ``single`` with one or two more images each (other rows' images)."""
    items, _ = read_tsv(single)
    more = [it.image_bytes for it in reversed(items)]
    write_tsv(path, [replace(it, more_images=tuple(more[i : i + 1 + i % 2])) for i, it in enumerate(items[:n])])
    return path


@pytest.mark.slow
def test_lmms_eval_cli_scores_the_tiny_model_as_evaluate_does(tmp_path: Path) -> None:
    env = _env()
    tsv = mcq_tsv(tmp_path / "mcq.tsv", 8)
    score, rows = _evaluate(tsv, tmp_path / "r")
    (tmp_path / "tasks").mkdir()
    _task(tmp_path / "tasks", "sparsectx_tiny_mcq", tsv, compose_eval(OVERRIDES).prompt.mcq_hint)
    results, _ = _lmms_eval(env, tmp_path, ["sparsectx_tiny_mcq"], 1, MODEL_ARGS)
    acc = json.loads(results.read_text())["results"]["sparsectx_tiny_mcq"]["acc,none"]
    assert 100 * acc == pytest.approx(score, abs=1e-9)
    assert 0 < score < 100  # the items are not all answered alike
    assert _logged(results, "sparsectx_tiny_mcq") == {i: row["answer"] or "" for i, row in rows.items()}


@pytest.mark.slow
def test_batched_requests_and_every_image_of_a_multi_image_row_give_evaluates_outputs(tmp_path: Path) -> None:
    """``--batch_size 3``: 13 requests in 5 engine calls (8 and 5 rows, grouped per task), each raw output the one
    ``evaluate.py`` generated for the row, multi-image rows with all their images in the prompt."""
    env = _env()
    single = mcq_tsv(tmp_path / "mcq.tsv", 8)
    multi = multi_image_tsv(tmp_path / "multi.tsv", single, 5)
    assert [len(it.more_images) for it in read_tsv(multi)[0]] == [1, 2, 1, 2, 1]
    _, single_rows = _evaluate(single, tmp_path / "r1")
    _, multi_rows = _evaluate(multi, tmp_path / "r2")
    assert len({row["prompt"].count("<|image_pad|>") for row in multi_rows.values()}) == 2  # 2 and 3 images
    hint = compose_eval(OVERRIDES).prompt.mcq_hint
    (tmp_path / "tasks").mkdir()
    _task(tmp_path / "tasks", "sparsectx_tiny_mcq", single, hint)
    _task(tmp_path / "tasks", "sparsectx_tiny_multi", multi, hint)
    results, log = _lmms_eval(
        env, tmp_path, ["sparsectx_tiny_mcq", "sparsectx_tiny_multi"], 3, MODEL_ARGS + ",return_output=true"
    )
    assert re.search(r"13 requests in 5 HarnessModel\.generate calls \(batch_size 3\)", log), log[-3000:]
    assert _logged(results, "sparsectx_tiny_mcq", raw=True) == {i: row["output"] for i, row in single_rows.items()}
    assert _logged(results, "sparsectx_tiny_multi", raw=True) == {i: row["output"] for i, row in multi_rows.items()}
    assert math.isfinite(json.loads(results.read_text())["results"]["sparsectx_tiny_multi"]["acc,none"])
