"""A rerun's W&B segments share one run id and keep every segment's history, offline and once synced
(issue 42, item 2).

Two segments per run, written with the real wandb library in offline mode through ``sparsectx.tracking``:
a training killed after logging steps 1-3 (its last state at step 1) and resumed, so it logs steps 2-4 again;
an evaluation rerun that scores another benchmark. Read back from the ``.wandb`` transaction logs
(``wandb.proto`` records), then uploaded by the sync command docs/tracking.md documents, run as written against
a W&B server on localhost (``fake_wandb_server``) and read back from what it received.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import wandb

from sparsectx.tracking import STEP_METRIC, LoggerConfig, Tracker, start_run

from .fake_wandb_server import fake_wandb_server
from .wandb_records import history, run_info, run_records

ROOT = Path(__file__).resolve().parents[2]
CELL = {"model": "tiny", "method": "scopd_plus", "pruner": "visionzip", "budget": "0.1", "seed": 0}
TRAIN_SEGMENTS = ([1, 2, 3], [2, 3, 4])
"""Steps each training segment logs: the second resumes from the state at step 1."""
EVAL_SEGMENTS = ({"syn_count/score": 0.5}, {"syn_ocr/score": 0.25})
"""What each evaluation segment logs: the rerun scores a benchmark the first did not."""


def offline_logger(root: Path) -> LoggerConfig:
    """Returns an offline W&B logger writing under ``root``."""
    return LoggerConfig(
        name="wandb",
        project="sparsectx",
        entity=None,
        mode="offline",
        dir=str(root),
        rollout_rows=1,
        prediction_rows=1,
        log_checkpoints=False,
    )


def loss(segment: int, step: int) -> float:
    """Returns the loss a training segment logs at ``step`` (the segments differ, so each row is traceable)."""
    return 10.0 * segment + step


@pytest.fixture(scope="module")
def wandb_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Returns the logger directory after both runs' two offline segments (``<root>/wandb/offline-run-*``)."""
    root = tmp_path_factory.mktemp("resumed")
    with pytest.MonkeyPatch.context() as env:
        env.delenv("WANDB_MODE", raising=False)
        env.setenv("WANDB_SILENT", "true")
        env.setenv("WANDB_DATA_DIR", str(root / "wandb-data"))
        env.setenv("WANDB_CACHE_DIR", str(root / "wandb-cache"))
        cfg = offline_logger(root)
        for segment, steps in enumerate(TRAIN_SEGMENTS):
            tracker = start_run(cfg, "tiny/scopd_plus/visionzip/b0.1/s0", "exp", "train", [], {}, cell=CELL)
            for step in steps:
                tracker.log({"train/loss": loss(segment, step)}, step=step)
            end_process(tracker)
        for metrics in EVAL_SEGMENTS:
            tracker = start_run(cfg, "eval", "exp", "evaluate", [], {}, cell={**CELL, "mode": "greedy"})
            tracker.log(metrics)
            end_process(tracker)
    return root


def end_process(tracker: Tracker) -> None:
    """Finishes the run as the end of a job's process does: W&B's service writes the run's files (its
    ``.wandb`` log, ``files/wandb-summary.json``) when it gets to them, and ``wandb.teardown`` waits for that,
    as the exit of a process does; a rerun is another process."""
    tracker.finish()
    wandb.teardown()


def segments(root: Path, job_type: str) -> list[Path]:
    """Returns the offline run directories of ``job_type``, oldest first (W&B names them by start time)."""
    runs = [d for d in (root / "wandb").glob("offline-run-*") if run_info(d).job_type == job_type]
    return sorted(runs, key=lambda d: run_info(d).start_time.ToNanoseconds())


def segment_summary(run_dir: Path) -> dict[str, Any]:
    """Returns the summary a segment leaves: its ``summary`` records applied in order (each sets and removes
    keys: ``SummaryRecord.update`` / ``remove``)."""
    summary: dict[str, Any] = {}
    for record in run_records(run_dir):
        if record.WhichOneof("record_type") == "summary":
            for item in record.summary.update:
                summary[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
            for item in record.summary.remove:
                summary.pop(item.key or "/".join(item.nested_key), None)
    return summary


def test_the_segments_of_a_rerun_share_one_run_id_and_each_keeps_its_history(wandb_root: Path) -> None:
    train = segments(wandb_root, "train")
    assert len(train) == 2 and len({run_info(d).run_id for d in train}) == 1
    for segment, (run_dir, steps) in enumerate(zip(train, TRAIN_SEGMENTS, strict=True)):
        rows = history(run_dir)
        assert [row[STEP_METRIC] for row in rows] == steps  # the optimizer step rides along as a metric
        assert [row["train/loss"] for row in rows] == [loss(segment, step) for step in steps]
    evaluate = segments(wandb_root, "evaluate")
    assert len(evaluate) == 2 and len({run_info(d).run_id for d in evaluate}) == 1
    assert run_info(evaluate[0]).run_id != run_info(train[0]).run_id
    # offline, W&B cannot fetch the run's summary on resume: the rerun carries the earlier segment's forward
    assert {"syn_count/score", "syn_ocr/score"} <= set(segment_summary(evaluate[-1]))


def sync_command() -> str:
    """Returns the sync command docs/tracking.md gives (the first ```wandb sync ...``` code span)."""
    match = re.search(r"`((?:\w+=\S+ )*wandb sync [^`]+)`", (ROOT / "docs/tracking.md").read_text())
    assert match, "docs/tracking.md gives no `wandb sync ...` command"
    return match.group(1)


def test_the_documented_sync_uploads_every_segment_into_one_run(wandb_root: Path) -> None:
    venv_bin = str(Path(sys.executable).parent)
    with fake_wandb_server() as server:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("WANDB_")},
            "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
            "WANDB_BASE_URL": server.url,
            "WANDB_API_KEY": "k" * 40,  # any key: the server on localhost checks none
            "WANDB_CONFIG_DIR": str(wandb_root / "wandb-config"),
            "WANDB_CACHE_DIR": str(wandb_root / "wandb-cache"),
            "WANDB_DATA_DIR": str(wandb_root / "wandb-data"),
        }
        done = subprocess.run(
            ["bash", "-c", sync_command()], cwd=wandb_root, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr
    train_id = run_info(segments(wandb_root, "train")[0]).run_id
    eval_id = run_info(segments(wandb_root, "evaluate")[0]).run_id
    assert set(server.runs) == {train_id, eval_id}
    rows = server.runs[train_id].rows()
    assert None not in rows, "a segment's history was written over another's, or left a hole"
    assert [row[STEP_METRIC] for row in rows] == [step for steps in TRAIN_SEGMENTS for step in steps]
    assert [row["train/loss"] for row in rows] == [
        loss(segment, step) for segment, steps in enumerate(TRAIN_SEGMENTS) for step in steps
    ]
    assert [row["_step"] for row in rows] == sorted({row["_step"] for row in rows})  # W&B's own step increases
    assert {"syn_count/score", "syn_ocr/score"} <= set(server.runs[eval_id].summary)
