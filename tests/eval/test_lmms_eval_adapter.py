"""lmms-eval's CLI evaluates the shipped tiny model through ``SparsectxLMM`` (model ``sparsectx``, found through
the ``lmms_eval.models`` entry point), offline, on a local task, with ``evaluate.py``'s score on the same items.

Runs in lmms-eval's environment (``make lmms-env``; skipped with that message when absent). The task is
written here (``include_path``): a JSON-lines file of the TSV's rows, ``doc_to_text`` the question as the
project formats it, ``process_results`` VLMEvalKit's exact-matching MCQ reading (``mcq_vlmeval``, the
scorer ``evaluate.py`` uses on the same file). Item by item, lmms-eval's logged answers are
``evaluate.py``'s extracted answers.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path

import pytest

from sparsectx.data import format_question, read_tsv
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
task: sparsectx_tiny_mcq
test_split: test
output_type: generate_until
doc_to_visual: !function sparsectx_tiny_mcq_utils.doc_to_visual
doc_to_text: !function sparsectx_tiny_mcq_utils.doc_to_text
doc_to_target: answer
generation_kwargs:
  max_new_tokens: 24
process_results: !function sparsectx_tiny_mcq_utils.process_results
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
    return [Image.open(io.BytesIO(base64.b64decode(doc["image"]))).convert("RGB")]

def doc_to_text(doc, lmms_eval_specific_kwargs=None):
    return doc["text"]

def process_results(doc, results):
    options = {k: v for k, v in doc["options"].items() if v}
    return {"acc": float(vlmeval_choice(results[0], options) == doc["answer"])}
"""


def _env() -> Path:
    env = Path(os.environ.get("SPARSECTX_LMMS_ENV", REPO / ".lmms-env"))
    if not (env / "bin" / "lmms-eval").is_file():
        pytest.skip(f"no lmms-eval environment at {env}: build it with `make lmms-env`")
    return env


@pytest.mark.slow
def test_lmms_eval_cli_scores_the_tiny_model_as_evaluate_does(tmp_path: Path) -> None:
    env = _env()
    tsv = mcq_tsv(tmp_path / "mcq.tsv", 8)
    cfg = compose_eval(
        [*OVERRIDES, f"bench.syn_mcq.path={tsv}", "logger=none", f"results_root={tmp_path / 'r'}"]
    )
    (result,) = run(cfg)
    score = json.loads(result.read_text())["score"]
    rows = predictions_path(result.parent, "syn_mcq").read_text().splitlines()
    answers = {int(r["id"]): r["answer"] or "" for r in map(json.loads, rows)}
    items, _ = read_tsv(tsv)
    hint = cfg.prompt.mcq_hint
    data = tmp_path / "tiny_mcq.jsonl"
    data.write_text("".join(json.dumps({
        "index": it.index, "image": base64.b64encode(it.image_bytes).decode(), "answer": it.answer,
        "options": it.options, "text": format_question(it.question, it.options, hint),
    }) + "\n" for it in items))  # fmt: skip
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "sparsectx_tiny_mcq.yaml").write_text(TASK.format(data=data))
    (tasks / "sparsectx_tiny_mcq_utils.py").write_text(UTILS)
    args = "model=tiny,pruner=random,budget=0.1,bench=syn_mcq,overrides='bench.syn_mcq.max_new_tokens=24 batch_size=4'"
    command = [
        str(env / "bin" / "lmms-eval"), "eval", "--model", "sparsectx", "--model_args", args, "--tasks",
        "sparsectx_tiny_mcq", "--include_path", str(tasks), "--batch_size", "1", "--output_path",
        str(tmp_path / "out"), "--log_samples",
    ]  # fmt: skip
    offline = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "disabled"}
    done = subprocess.run(command, cwd=tmp_path, env={**os.environ, **offline}, capture_output=True, text=True,
                          timeout=1200, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    found = list((tmp_path / "out").rglob("*_results.json"))
    assert len(found) == 1, (done.stdout + done.stderr)[-4000:]  # lmms-eval exits 0 when a task fails to load
    (results,) = found
    acc = json.loads(results.read_text())["results"]["sparsectx_tiny_mcq"]["acc,none"]
    assert 100 * acc == pytest.approx(score, abs=1e-9)
    assert 0 < score < 100  # the items are not all answered alike
    (samples,) = list((tmp_path / "out").rglob("*sparsectx_tiny_mcq*.jsonl"))
    logged = [json.loads(line) for line in samples.read_text().splitlines()]
    assert {s["doc_id"]: s["filtered_resps"] for s in logged} == answers  # doc_id: the row, = its index here
