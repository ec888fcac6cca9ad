"""The per-step rollout statistics behind SCOPD Fig. 7 (``steps.rollout_sums``, ``update.rollout_metrics``) and
the per-step log a resumed run cuts back to its state (``loop.trim_step_log``)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from sparsectx.data import Item
from sparsectx.training.loop import trim_step_log
from sparsectx.training.steps import rollout_sums
from sparsectx.training.update import rollout_metrics


def _item(answer: str) -> Item:
    return Item(
        index=0,
        image_bytes=b"",
        question="q",
        options={},
        answer=answer,
        category="",
        family="",
        subset="",
        trace="",
        scene="",
        extra={},
    )


def test_group_composition_lengths_and_format_are_counted_per_rollout() -> None:
    """Two groups of G = 3: one mixed (2 of 3 right), one all wrong; lengths 2..7 tokens."""
    right, wrong = "<think>x</think><answer>4</answer>", "<answer>5</answer>"
    texts = [right, right, wrong, wrong, wrong, "no tags"]
    mb = SimpleNamespace(
        items=[_item("4")] * 6,
        prefix=SimpleNamespace(texts=texts, tokens=[torch.zeros(n) for n in range(2, 8)]),
        group=SimpleNamespace(group_size=3),
    )
    sums = rollout_sums(mb)  # type: ignore[arg-type]
    assert sums == {
        "graded": 6.0,
        "correct": 2.0,
        "formatted": 2.0,
        "correct_length_sum": 2.0 + 3.0,
        "wrong_length_sum": 4.0 + 5.0 + 6.0 + 7.0,
        "groups": 2.0,
        "groups_all_correct": 0.0,
        "groups_mixed": 1.0,
    }
    metrics = rollout_metrics(sums)
    assert metrics["rollout/accuracy"] == pytest.approx(2 / 6)
    assert metrics["rollout/format_rate"] == pytest.approx(2 / 6)
    assert metrics["rollout/length_correct"] == pytest.approx(2.5)
    assert metrics["rollout/length_wrong"] == pytest.approx(5.5)
    assert metrics["rollout/pass_at_group"] == pytest.approx(0.5)
    assert (metrics["rollout/groups_mixed"], metrics["rollout/groups_all_wrong"]) == pytest.approx((0.5, 0.5))


def test_without_groups_or_correct_rollouts_those_metrics_are_absent() -> None:
    mb = SimpleNamespace(items=[_item("4")], prefix=SimpleNamespace(texts=["3"], tokens=[torch.zeros(3)]), group=None)
    metrics = rollout_metrics(rollout_sums(mb))  # type: ignore[arg-type]
    assert set(metrics) == {"rollout/accuracy", "rollout/format_rate", "rollout/length_wrong"}


def test_a_resumed_run_keeps_the_log_up_to_its_state(tmp_path: Path) -> None:
    path = tmp_path / "steps.jsonl"
    path.write_text("".join(json.dumps({"step": s, "train/loss": s}) + "\n" for s in (1, 2, 3, 4)))
    trim_step_log(path, 2)
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 2]
    trim_step_log(path, 0)
    assert path.read_text() == ""
