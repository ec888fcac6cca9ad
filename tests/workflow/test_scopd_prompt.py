"""SCOPD's real preset asks and trains with the paper's reasoning instruction (seed 004, App. C "Evaluation
protocol" and App. A "Prompt": "First output the thinking process in <think> </think> tags and then output the
final answer in <answer> </answer> tags.", appended to every question, the same in post-training); the tiny
world keeps the wording its shipped model was trained on."""

from __future__ import annotations

from hydra import compose, initialize_config_dir

from sparsectx import workflow as wf
from sparsectx.eval.config import load_eval_config
from sparsectx.training.config import load_train_config

SCOPD_INSTRUCTION = (
    "First output the thinking process in <think> </think> tags and then output the final answer in "
    "<answer> </answer> tags."
)


def _compose(root: str, overrides: list[str]):
    with initialize_config_dir(version_base=None, config_dir=str(wf.CONF_DIR)):
        return compose(root, overrides=overrides)


def test_every_scopd_job_carries_the_papers_instruction() -> None:
    grid = wf.load_grid("scopd_qwen2_5_vl_7b")
    train = load_train_config(_compose("train", ["experiment=scopd_qwen2_5_vl_7b", *grid.overrides("train")]))
    assert train.train_data.instruction == SCOPD_INSTRUCTION
    for stage in ("evaluate", "passk", "efficiency"):
        cfg = load_eval_config(_compose("evaluate", ["experiment=scopd_qwen2_5_vl_7b", *grid.overrides(stage)]))
        assert cfg.prompt.instruction == SCOPD_INSTRUCTION, stage


def test_the_tiny_study_keeps_the_instruction_its_model_was_trained_on() -> None:
    grid = wf.load_grid("tiny_scopd")
    cfg = load_eval_config(_compose("evaluate", ["experiment=tiny_scopd", *grid.overrides("evaluate")]))
    assert cfg.prompt.instruction != SCOPD_INSTRUCTION
    assert cfg.prompt.instruction.startswith("First think step by step")
