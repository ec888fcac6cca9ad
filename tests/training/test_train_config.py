"""Config errors before any work starts: each names the full dotted key, the value and the fix."""

from __future__ import annotations

import pytest
from hydra.errors import MissingConfigException
from omegaconf.errors import ConfigKeyError

from sparsectx.training import loop
from sparsectx.training.config import load_train_config

from .test_loop_support import TinyEnv, compose_train, shared_env, train_overrides


@pytest.fixture(scope="session")
def tiny_env(tmp_path_factory: pytest.TempPathFactory) -> TinyEnv:
    """Returns the session's tiny model directory and training TSV."""
    return shared_env(tmp_path_factory)


def load(env, tmp_path, *overrides: str):  # noqa: ANN001, ANN201
    """Returns the checked config of ``conf/train.yaml`` shrunk for CPU, with ``overrides``."""
    return load_train_config(compose_train([*train_overrides(env, tmp_path), *overrides]))


@pytest.mark.parametrize(
    ("overrides", "error", "pattern"),
    [
        (
            ["method=scopd_plus", "method.positions.delta=0.0"],
            ValueError,
            r"method\.positions\.delta=0\.0 must be > 0",
        ),
        (
            ["method=scopd_plus", "method.positions.delta=-0.01"],
            ValueError,
            r"method\.positions\.delta=-0\.01",
        ),
        (["method=scopd_plus", "method.positions.delta=null"], ValueError, r"method\.positions\.delta=None"),
        (
            ["method=scopd_plus", "method.positions.fraction=0.0"],
            ValueError,
            r"method\.positions\.fraction=0\.0 is outside \(0, 1\]",
        ),
        (
            ["method=scopd_plus", "method.positions.fraction=1.5"],
            ValueError,
            r"method\.positions\.fraction=1\.5",
        ),
        (
            ["method=scopd_plus", "method.positions.fraction=null"],
            ValueError,
            r"method\.positions\.fraction is null",
        ),
        (
            ["method=scopd", "method.positions.fraction=0.1"],
            ValueError,
            r"method\.positions\.fraction=0\.1 is not used",
        ),
        (
            ["method=lt_opd", "method.schedule.params.cosine_curriculum.start_budget=0.01"],
            ValueError,
            r"method\.schedule\.params\.cosine_curriculum: final_budget=0\.05 is above start_budget=0\.01",
        ),
        (
            ["method=scopd", "method.divergence.name=forward_k"],
            KeyError,
            r"method\.divergence\.name='forward_k'.*forward_kl",
        ),
        (["method=scopd", "method.positions.name=top_sens"], KeyError, r"method\.positions\.name"),
        (
            ["method=scopd_div_jsd", "method.divergence.beta=1.5"],
            ValueError,
            r"method\.divergence\.beta=1\.5",
        ),
        (
            ["method=scopd_div_jsd", "method.divergence.beta=null"],
            ValueError,
            r"method\.divergence\.beta is null",
        ),
        (
            ["method=scopd", "method.teacher.kind=ema_teacher"],
            ValueError,
            r"method\.teacher\.kind='ema_teacher'",
        ),
        (["method=sft", "method.teacher.kind=frozen"], ValueError, r"method\.teacher\.kind='frozen'.*sft"),
        (["method=scopd", "method.prefix=rollouts"], ValueError, r"method\.prefix='rollouts'"),
        (
            ["method=scopd", "memory.teacher_offload=true"],
            ValueError,
            r"memory\.teacher_offload=True .*method\.teacher\.kind='ema'.*set memory\.teacher_offload=false",
        ),
        (
            [
                "method=lt_opd",
                "method.lora.enabled=true",
                "method.train_vision=false",
                "memory.teacher_offload=true",
            ],
            ValueError,
            r"memory\.teacher_offload=True with method\.lora\.enabled=True",
        ),
        (["method=sft", "memory.teacher_offload=true"], ValueError, r"memory\.teacher_offload=True .*'none'"),
        (
            ["method=scopd", "memory.optimizer_states=int4"],
            ValueError,
            r"memory\.optimizer_states='int4' is not one of \['fp32', 'int8'\]",
        ),
        (["method=scopd", "budget=0.0"], ValueError, r"budget=0\.0 is outside \(0, 1\]"),
        (["method=scopd_plus", "budget=1.0"], ValueError, r"method\.positions\.delta=0\.01 .* exceeds 1"),
        (
            ["method=scopd", "+pruner.params.contextual_shar=0.1"],
            KeyError,
            r"unknown pruner\.params\.contextual_shar",
        ),
        (
            ["method=scopd", "method.schedule.name=cosine_curriculum"],
            KeyError,
            r"method\.schedule\.params\.cosine_curriculum is missing",
        ),
    ],
)
def test_bad_values_raise_naming_the_key(overrides, error, pattern, tiny_env, tmp_path) -> None:  # noqa: ANN001
    with pytest.raises(error, match=pattern):
        load(tiny_env, tmp_path, *overrides)


def test_unknown_method_lists_the_presets(tiny_env, tmp_path) -> None:  # noqa: ANN001
    with pytest.raises(MissingConfigException, match=r"(?s)method/scopd_plsu.*scopd_plus"):
        compose_train([*train_overrides(tiny_env, tmp_path), "method=scopd_plsu"])


def test_null_seed_and_unknown_keys_raise(tiny_env, tmp_path) -> None:  # noqa: ANN001
    overrides = [o for o in train_overrides(tiny_env, tmp_path) if not o.startswith("seed=")]
    with pytest.raises(ValueError, match="full_key: seed"):
        load_train_config(compose_train([*overrides, "seed=null"]))
    with pytest.raises(ConfigKeyError, match="lerning_rate"):
        load(tiny_env, tmp_path, "+method.optim.lerning_rate=1.0")


def test_effective_batch_must_factor(tiny_env, tmp_path) -> None:  # noqa: ANN001
    cfg = load(tiny_env, tmp_path, "micro_batch_size=3")
    with pytest.raises(ValueError, match=r"method\.effective_batch_size=2 != processes \(1\) x micro_batch_size \(3\)"):
        cfg.accumulation(processes=1)
    assert load(tiny_env, tmp_path, "grad_accum=null").accumulation(processes=1) == 2
    assert (
        load(tiny_env, tmp_path, "method.effective_batch_size=4", "grad_accum=2", "micro_batch_size=2").accumulation(1)
        == 2
    )


def test_config_errors_come_before_any_work(tiny_env, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    def no_model(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model must not load when the config is invalid")

    monkeypatch.setattr(loop, "load_model", no_model)
    cfg = compose_train(
        [*train_overrides(tiny_env, tmp_path / "runs"), "method=scopd_plus", "method.positions.delta=0"]
    )
    with pytest.raises(ValueError, match=r"method\.positions\.delta"):
        loop.run(cfg)
    assert not (tmp_path / "runs").exists()


def test_presets_compose_with_their_documented_values(tiny_env, tmp_path) -> None:  # noqa: ANN001
    # under a model with no scale file: the tiny model trains at its own rates (conf/model/scale/train/tiny.yaml)
    cfg = load(tiny_env, tmp_path, "model=qwen2_5_vl_7b", "method=scopd", "method.effective_batch_size=32")
    m = cfg.method
    assert (cfg.budget, cfg.pruner.name, m.divergence.name, m.teacher.kind, m.teacher.ema_decay) == (
        0.1,
        "visionzip",
        "forward_kl",
        "ema",
        0.9999,
    )
    assert (m.lora.enabled, m.lora.r, m.lora.alpha, m.lora.dropout, m.optim.lr, m.optim.lr_schedule) == (
        True,
        16,
        32,
        0.0,
        2e-5,
        "constant",
    )
    assert m.lora.target_modules == [
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    ]
    plus = load(tiny_env, tmp_path, "method=scopd_plus", "budget=0.2").method
    assert (plus.positions.name, plus.positions.fraction, plus.positions.delta) == (
        "top_sensitivity",
        0.1,
        0.01,
    )
    assert plus.schedule.kwargs() == {"budget": 0.2}  # budget=<b> reaches the schedule
    lt = load(tiny_env, tmp_path, "method=lt_opd", "method.effective_batch_size=2")
    assert (lt.budget, lt.pruner.name, lt.method.divergence.name, lt.method.divergence.beta) == (
        0.05,
        "cdpruner",
        "jsd",
        0.5,
    )
    assert (lt.method.divergence.top_k, lt.method.teacher.kind, lt.method.lora.enabled) == (
        100,
        "frozen",
        False,
    )
    assert lt.method.schedule.name == "cosine_curriculum"
    assert lt.method.schedule.kwargs()["final_budget"] == 0.05
    assert load(tiny_env, tmp_path, "method=lt_opd", "pruner=random").pruner.name == "random"  # CLI wins
