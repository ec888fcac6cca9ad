"""The model card's evaluation table: a Markdown table for the reader and the Hub's ``model-index`` metadata, written
with huggingface_hub's own classes and read back by its own parser (``ModelCard.load``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from huggingface_hub import ModelCard

from sparsectx.training.config import load_train_config
from sparsectx.training.model_card import ADAPTER, MERGED, BaseModel, Evaluation, render_card, training_facts

from .test_loop_support import TinyEnv, compose_train, train_overrides

BASE = BaseModel("Org/Base-VL", "0" * 40, "Org/Base-VL@" + "0" * 40)
ROWS = (
    Evaluation("syn_count", "SynCount", "number_match", 26.0, "visionzip", 0.1, 100),
    Evaluation("syn_count", "SynCount", "number_match", 31.5, "divprune", 0.1, 100),
    Evaluation("MMBench_DEV_EN", "MMBench_DEV_EN", "mcq_accuracy", 71.25, "visionzip", 0.1, 4329),
)


@pytest.fixture(scope="module")
def facts(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Returns the training facts of a SCOPD run of the tiny model at visionzip 0.1 (its config only: the paths
    are names, nothing is read or trained)."""
    root = tmp_path_factory.mktemp("card")
    env = TinyEnv(root / "model", root / "train.tsv")
    tc = load_train_config(compose_train([*train_overrides(env, root / "runs"), "method=scopd"]))
    return training_facts(tc, steps=2, samples_seen=4)


@pytest.mark.parametrize("kind", [MERGED, ADAPTER])
def test_evaluations_become_a_table_and_the_hubs_model_index(kind: str, facts: dict, tmp_path: Path) -> None:
    card_file = tmp_path / "README.md"
    card_file.write_text(render_card(kind, BASE, facts, ROWS), encoding="utf-8")
    card = ModelCard.load(card_file)
    assert card.data.model_name == "tiny-scopd-visionzip-0.1"
    found = {(r.dataset_name, r.metric_args["pruner"]): r for r in card.data.eval_results}
    assert set(found) == {("syn_count", "visionzip"), ("syn_count", "divprune"), ("MMBench_DEV_EN", "visionzip")}
    count = found[("syn_count", "visionzip")]
    assert (count.task_type, count.dataset_type, count.metric_type, count.metric_value) == (
        "image-text-to-text",
        "SynCount",
        "number_match",
        26.0,
    )
    assert count.metric_args == {"pruner": "visionzip", "budget": 0.1, "items": 100}
    lines = card.text.splitlines()
    header = lines.index("| benchmark | pruner | budget | score | scorer | items |")
    assert lines[header + 2 : header + 5] == [
        "| syn_count | visionzip | 0.1 (as trained) | 26.00 | number_match | 100 |",
        "| MMBench_DEV_EN | visionzip | 0.1 (as trained) | 71.25 | mcq_accuracy | 4329 |",
        "| syn_count | divprune | 0.1 | 31.50 | number_match | 100 |",
    ]  # the setting the model was trained for first


def test_a_card_without_evaluations_has_no_table_and_no_model_index(facts: dict) -> None:
    card = render_card(MERGED, BASE, facts)
    assert "model-index" not in yaml.safe_load(card.split("---\n", 2)[1])
    assert "## Evaluation" not in card
