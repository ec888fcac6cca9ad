"""Every W&B run has an identity: one run per leaf and job, under an id derived from what the job is, resumed
rather than duplicated on a rerun, named and tagged with its model, method, pruner, budget, seed and
benchmarks (issue 42, item 2).

``wandb.init`` is replaced by a recorder (nothing is written); the configs are composed, not run.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import wandb
from eval.test_runner_support import compose_eval
from training.test_loop_support import TinyEnv, compose_train, train_overrides

from sparsectx.eval import runner
from sparsectx.eval.config import load_eval_config
from sparsectx.tracking import run_id
from sparsectx.training import loop
from sparsectx.training.config import load_train_config

CELL = {"model": "tiny", "method": "scopd_plus", "pruner": "visionzip", "budget": "0.1", "seed": 0}


class RecordedRun:
    """Stands in for the run ``wandb.init`` returns: its id is the one asked for."""

    def __init__(self, **kwargs: Any) -> None:
        self.id = kwargs["id"] or "random"

    def log(self, *args: Any, **kwargs: Any) -> None:
        """Logs nothing."""

    def finish(self) -> None:
        """Finishes nothing."""


@pytest.fixture
def inits(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Returns the keyword arguments of every ``wandb.init`` call."""
    calls: list[dict[str, Any]] = []

    def init(**kwargs: Any) -> RecordedRun:
        calls.append(kwargs)
        return RecordedRun(**kwargs)

    monkeypatch.setattr(wandb, "init", init)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    return calls


def test_run_ids_keep_to_wandbs_alphabet_and_change_with_every_part_of_the_identity() -> None:
    base = run_id("exp", "train", CELL)
    assert re.fullmatch(r"[a-z0-9]{8,64}", base) and base == run_id("exp", "train", dict(reversed(CELL.items())))
    changed = [run_id("exp2", "train", CELL), run_id("exp", "evaluate", CELL)]
    changed += [run_id("exp", "train", {**CELL, key: f"{value}x"}) for key, value in CELL.items()]
    assert base not in changed and len(set(changed)) == len(changed)
    assert run_id("exp", "evaluate", {"bench": ["b", "a"]}) == run_id("exp", "evaluate", {"bench": ["a", "b"]})


def eval_tracker(tmp_path: Path, *overrides: str) -> None:
    """Starts (and finishes) the W&B run of an evaluation composed with ``overrides``."""
    logger = ["logger=wandb", "logger.mode=offline", f"logger.dir={tmp_path}", "model=tiny", "budget=0.25"]
    runner._tracker(load_eval_config(compose_eval([*logger, *overrides])), {}).finish()


def test_a_rerun_of_an_evaluation_resumes_its_run_and_each_benchmark_job_has_its_own(
    inits: list[dict[str, Any]], tmp_path: Path
) -> None:
    eval_tracker(tmp_path, "bench=syn_count")
    eval_tracker(tmp_path, "bench=syn_count")  # the same job again
    eval_tracker(tmp_path, "bench=syn_ocr")  # the leaf's other per-benchmark job
    first, again, other = inits
    assert first["id"] == again["id"] and first["resume"] == again["resume"] == "allow"
    assert other["id"] != first["id"] and other["name"] != first["name"]
    assert "syn_count" in first["name"] and "syn_ocr" in other["name"] and "s0" in first["name"]
    assert {
        "experiment:dev",
        "job:evaluate",
        "model:tiny",
        "method:base",
        "pruner:visionzip",
        "budget:0.25",
        "seed:0",
        "mode:greedy",
        "bench:syn_count",
    } <= set(first["tags"])


def trainer_stub(wandb_id: str | None) -> SimpleNamespace:
    """Returns what ``open_tracker`` reads of a trainer: the main process, and the run id its state holds."""
    return SimpleNamespace(accelerator=SimpleNamespace(is_main_process=True), wandb_id=wandb_id)


def test_training_opens_its_run_under_its_identity_and_keeps_the_id_its_state_holds(
    inits: list[dict[str, Any]], tmp_path: Path
) -> None:
    env = TinyEnv(tmp_path / "model", tmp_path / "train.tsv")  # composed only: nothing is read
    overrides = [*train_overrides(env, tmp_path / "runs"), "method=scopd_plus", "logger=wandb"]
    overrides += ["logger.mode=offline", f"logger.dir={tmp_path}"]
    tc = load_train_config(loop.with_resolved_run_tag(compose_train(overrides)))
    fresh, rerun, older = trainer_stub(None), trainer_stub(None), trainer_stub("k2x9q1ab")
    for trainer in (fresh, rerun, older):
        loop.open_tracker(tc, {}, trainer).finish()
    assert inits[0]["id"] == inits[1]["id"] == fresh.wandb_id == rerun.wandb_id  # a rerun resumes, state or not
    assert inits[2]["id"] == older.wandb_id == "k2x9q1ab"  # a run whose state holds an id keeps it
    assert all(call["resume"] == "allow" for call in inits)
    assert {"model:tiny", "method:scopd_plus", "pruner:visionzip", "budget:0.1", "seed:0"} <= set(inits[0]["tags"])
    assert inits[0]["name"] == "tiny/scopd_plus/visionzip/b0.1/s0"
