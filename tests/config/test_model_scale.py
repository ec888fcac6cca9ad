"""The model picks its run length: tiny composes conf/model/scale/*/tiny.yaml, the real models the papers' settings.

conf/train.yaml and conf/evaluate.yaml select ``model/scale/<root>`` by the model's name, after the method
preset; the real models have no such file. The paper values below are the ones the method presets and the
primary configs document (with the seed section they cite).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from sparsectx.eval.config import load_eval_config
from sparsectx.training.config import load_train_config

CONF = Path(__file__).resolve().parents[2] / "conf"
SCALE = CONF / "model" / "scale"
REAL_MODELS = ("qwen2_5_vl_7b", "qwen3_vl_4b")
REAL_TRAINING_FILE = "train_data.path=data/llava_cot_10k.tsv"  # the tiny set is refused (sparsectx.train_data_check)

PAPER_EFFECTIVE_BATCH = {
    "scopd": 32,  # "an effective batch size of 32 across four GPUs" (seed 004 §4.1; conf/method/scopd.yaml)
    "scopd_plus": 32,  # inherits SCOPD's
    "lt_opd": 80,  # "175 updates of 80 questions" (seed 000 App. A; conf/method/lt_opd.yaml)
}
PAPER_ROLLOUTS = {
    "scopd": 1,  # one rollout per prompt (conf/method/scopd.yaml)
    "scopd_plus": 1,  # inherits SCOPD's
    "lt_opd": 8,  # "112,000 generated trajectories" over 175 updates of 80 questions (seed 000 App. B)
}
PAPER_TRAIN = {
    "steps": 100,  # conf/train.yaml's default for a hand run; the real presets pass each paper's length
    "micro_batch_size": 1,  # 4 GPUs x 1 x 8 accumulation (seed 004 §4.1)
    "max_new_tokens": 512,  # rollout cap, within SCOPD's 512-1024 (conf/train.yaml)
}
PAPER_EVAL = {
    "passk.n": 64,  # "64 stochastic responses per example" (seed 004 App. A)
    "passk.max_new_tokens": 1024,  # "a maximum of 1024 new tokens" (seed 004 App. A)
    "passk.max_items": None,  # every cohort item
    "passk.sample_batch": 16,
    "efficiency.num_items": 8,
    "efficiency.min_answer_tokens": 6,  # "at least six Qwen-tokenizer tokens" (seed 000 App. E.1)
    "efficiency.repetitions": 5,  # "each question is measured five times" (seed 000 App. E.1)
    "efficiency.warmup": 2,
    "efficiency.decode_tokens": 128,  # "replays a shared 128-token ... reference" (seed 000 App. E.1)
}


def _compose(root: str, overrides: list[str]) -> dict:
    with initialize_config_dir(version_base=None, config_dir=str(CONF)):
        cfg = compose(root, overrides=overrides)
    (load_train_config if root == "train" else load_eval_config)(cfg)  # the scaled config passes the schema
    return OmegaConf.to_container(cfg, resolve=True)


def _get(cfg: dict, dotted: str):
    for part in dotted.split("."):
        cfg = cfg[part]
    return cfg


def _leaves(node: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in node.items():
        if isinstance(value, dict):
            out.update(_leaves(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _scale_file(root: str) -> dict:
    """Returns the run-length keys of the tiny scale file (its rates, and the per-method files its defaults
    list adds: tests/config/test_tiny_hand_runs.py)."""
    leaves = _leaves(yaml.safe_load((SCALE / root / "tiny.yaml").read_text()))
    return {key: value for key, value in leaves.items() if key not in ("defaults", "method.optim.lr")}


@pytest.mark.parametrize("method", [None, "scopd_plus", "lt_opd"])
def test_tiny_training_takes_its_length_from_its_scale_file(method: str | None) -> None:
    scale = _scale_file("train")
    keys = {"steps", "micro_batch_size", "max_new_tokens", "method.effective_batch_size", "method.rollouts_per_prompt"}
    assert set(scale) == keys
    cfg = _compose("train", [] if method is None else [f"method={method}", "budget=0.1"])
    for key, value in scale.items():
        assert _get(cfg, key) == value, key
    assert scale["steps"] < PAPER_TRAIN["steps"]
    assert scale["method.effective_batch_size"] < min(PAPER_EFFECTIVE_BATCH.values())
    assert scale["max_new_tokens"] < PAPER_TRAIN["max_new_tokens"]


def test_tiny_passk_takes_its_sizes_from_its_scale_file() -> None:
    scale = _scale_file("evaluate")
    assert set(scale) == {key for key in PAPER_EVAL if key.startswith("passk.")}
    cfg = _compose("evaluate", ["mode=passk", "budget=0.1", "bench=syn_count"])
    for key, value in scale.items():
        assert _get(cfg, key) == value, key
    assert scale["passk.n"] < PAPER_EVAL["passk.n"]
    assert scale["passk.max_new_tokens"] < PAPER_EVAL["passk.max_new_tokens"]


def test_tiny_efficiency_keeps_the_papers_sizes() -> None:
    # measured: 8 items x (5 + 2) repetitions at 4 budgets take 70-100 s on the tiny model (2-core CPU)
    cfg = _compose("evaluate", ["mode=efficiency", "efficiency.budgets=[0.05,0.1,0.2]"])
    for key, value in PAPER_EVAL.items():
        if key.startswith("efficiency."):
            assert _get(cfg, key) == value, key


@pytest.mark.parametrize("model", REAL_MODELS)
@pytest.mark.parametrize("method", sorted(PAPER_EFFECTIVE_BATCH))
@pytest.mark.parametrize("experiment", [None, "scopd_qwen2_5_vl_7b", "ltopd_qwen3_5_4b"])
def test_real_models_train_at_the_papers_settings(model: str, method: str, experiment: str | None) -> None:
    overrides = [f"model={model}", f"method={method}"] + ([f"experiment={experiment}"] if experiment else [])
    cfg = _compose("train", [*overrides, REAL_TRAINING_FILE])
    for key, value in PAPER_TRAIN.items():
        assert _get(cfg, key) == value, key
    assert cfg["method"]["effective_batch_size"] == PAPER_EFFECTIVE_BATCH[method]
    assert cfg["method"]["rollouts_per_prompt"] == PAPER_ROLLOUTS[method]


@pytest.mark.parametrize("model", REAL_MODELS)
@pytest.mark.parametrize("experiment", [None, "scopd_qwen2_5_vl_7b", "ltopd_qwen3_5_4b"])
def test_real_models_evaluate_at_the_papers_settings(model: str, experiment: str | None) -> None:
    cfg = _compose("evaluate", [f"model={model}"] + ([f"experiment={experiment}"] if experiment else []))
    for key, value in PAPER_EVAL.items():
        assert _get(cfg, key) == value, key


def test_tiny_scale_equals_the_miniature_study_the_demo_passes() -> None:
    # a hand run of the headline commands matches `make demo`'s jobs (which pass these values themselves)
    grid = yaml.safe_load((CONF / "experiment" / "tiny.yaml").read_text())["grid"]["overrides"]
    passed = {
        key: yaml.safe_load(value)
        for stage in ("train", "passk", "efficiency")
        for key, value in (arg.split("=", 1) for arg in grid[stage])
    }
    for key, value in {**_scale_file("train"), **_scale_file("evaluate")}.items():
        assert passed[key] == value, key
