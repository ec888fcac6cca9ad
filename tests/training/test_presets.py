"""Every method preset (``conf/method/*.yaml``) composes, states its command, and runs one step on CPU."""

from __future__ import annotations

import math

import pytest

from sparsectx.training import judge_reward
from sparsectx.training.config import load_train_config
from sparsectx.training.loop import run
from sparsectx.training.method import PREFIX_KINDS
from sparsectx.training.rollout import PREFIX_SOURCES
from sparsectx.training.teacher_config import TEACHER_KINDS
from sparsectx.training.teachers import TEACHERS

from .test_loop_support import CONF_DIR, METHODS, TinyEnv, compose_train, shared_env, train_overrides


@pytest.fixture(scope="session")
def tiny_env(tmp_path_factory: pytest.TempPathFactory) -> TinyEnv:
    """Returns the session's tiny model directory and training TSV."""
    return shared_env(tmp_path_factory)


def test_the_presets_exist() -> None:
    expected = {
        "scopd",
        "scopd_plus",
        "scopd_gt",
        "lt_opd",
        "sft",
        "kd_fixed_prefix",
        "lt_opd_no_curriculum",
        "lt_opd_no_hold",
        "scopd_plus_select_random",
        "scopd_plus_select_top_kl",
        "scopd_plus_select_bottom",
        "scopd_teacher_fixed",
        "scopd_teacher_shared",
        "scopd_div_reverse",
        "scopd_div_jsd",
        "scopd_plus_select_tip",
        "sft_curriculum",
        "lt_opd_teacher_ema",
        "lt_opd_teacher_trust_region",
        "lt_opd_teacher_progressive",
        "lt_opd_div_forward",
        "lt_opd_div_reverse",
        "grpo",
        "gspo",
        "dapo",
        "epic",
        "epic_rescaled",
        "epic_lcd",
        "grpo_scopd_code",
        "grpo_judge",
    }
    assert expected <= set(METHODS)  # a new preset needs no line here: the tests below pick it up


def test_component_names_match_the_registries() -> None:
    assert set(PREFIX_KINDS) == set(PREFIX_SOURCES.names())
    assert set(TEACHER_KINDS) == {*TEACHERS.names(), "none"}


@pytest.mark.parametrize("method", METHODS)
def test_preset_names_itself_and_states_its_command(method: str, tiny_env, tmp_path) -> None:  # noqa: ANN001
    text = (CONF_DIR / "method" / f"{method}.yaml").read_text()
    assert text.startswith("# @package _global_\n")
    assert f"python src/train.py method={method} seed=0" in text
    cfg = load_train_config(compose_train([*train_overrides(tiny_env, tmp_path), f"method={method}"]))
    assert cfg.method.name == method


@pytest.mark.parametrize("method", METHODS)
def test_one_optimizer_step_of_every_preset(method: str, tiny_env, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    # no judge model is downloaded here: a scripted judge answers (tests/training/test_judge_reward.py)
    monkeypatch.setattr(judge_reward, "build_chat", lambda cfg: lambda prompt: "Yes")
    overrides = [*train_overrides(tiny_env, tmp_path), f"method={method}", "steps=1"]
    if load_train_config(compose_train(overrides)).pruner.stage == "llm":
        overrides.append("pruner.layer=1")  # the tiny LLM has 2 layers (epic_lcd trains with DART, K = 2)
    if load_train_config(compose_train(overrides)).method.positions.needs_probe:
        overrides.append("method.positions.delta=0.3")  # 16 visual tokens per image: 1% more would add none
    result = run(compose_train(overrides))
    assert result.steps == 1 and result.samples_seen == 2
    assert math.isfinite(result.metrics["train/loss"])
    if "rl/reward_mean" in result.metrics:  # a policy-gradient loss may be negative; all-flat groups drop
        assert 0.0 <= result.metrics["rl/informative_group_fraction"] <= 1.0
        assert 0.0 <= result.metrics["train/selected_fraction"] <= 1.0
    else:
        assert result.metrics["train/loss"] >= 0.0
        assert 0.0 < result.metrics["train/selected_fraction"] <= 1.0
    assert (result.checkpoint / "config.json").is_file() and (result.run_dir / "state" / "trainer.pt").is_file()
