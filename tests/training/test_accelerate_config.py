"""A user's accelerate config against the trainer's own keys (issue 42, item 3): refused before any work when it
asks for something the trainer governs itself, each error naming accelerate's variable and the project's key;
accepted when it agrees, and when there is none (``accelerate launch --num_processes N``, ``torchrun``).

The environment is the one accelerate itself makes: ``accelerate/commands/launch.py`` ``launch_command`` reads a
config file as ``accelerate config`` writes it (``--config_file``; never the user's own default file here) and
its launcher exports the settings (``accelerate/utils/launch.py``, ``prepare_multi_gpu_env`` and
``prepare_simple_launcher_cmd_env``); the launchers are stopped where they would start the script
(``_run_torchrun``, ``_run_subprocess``). DeepSpeed's launcher imports deepspeed, which is not installed, so its
environment is ``prepare_deepspeed_cmd_env``'s, called as ``launch_command`` would.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml

from sparsectx.cli import ConfigError
from sparsectx.training import loop

from .test_loop_support import TinyEnv, compose_train, shared_env, train_overrides

EXPORTED = ("ACCELERATE_", "FSDP_", "PARALLELISM_CONFIG_")
"""Prefixes of the variables accelerate's launchers export for the script (``accelerate/utils/launch.py``)."""
MACHINE = {
    "compute_environment": "LOCAL_MACHINE",
    "distributed_type": "MULTI_GPU",
    "num_machines": 1,
    "machine_rank": 0,
    "num_processes": 2,
    "gpu_ids": "all",
    "mixed_precision": "no",
    "use_cpu": False,
}
"""The keys ``accelerate config`` writes for one machine with two GPUs and no other choice made."""


@pytest.fixture(scope="session")
def tiny_env(tmp_path_factory: pytest.TempPathFactory) -> TinyEnv:
    """Returns the session's tiny model directory and training TSV."""
    return shared_env(tmp_path_factory)


def launched_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: dict | None, *flags: str) -> dict:
    """Returns the variables ``accelerate launch [--config_file <config>] <flags> src/train.py`` exports for the
    training script (no config: only the flags, as on a machine without ``accelerate config``)."""
    from accelerate.commands import launch
    from accelerate.utils import launch as launch_env

    monkeypatch.setattr(launch, "default_config_file", str(tmp_path / "no-default-config.yaml"))
    exported: dict[str, str] = {}
    monkeypatch.setattr(launch, "_run_torchrun", lambda args: exported.update(os.environ))
    monkeypatch.setattr(launch, "_run_subprocess", lambda cmd, env, quiet=False: exported.update(env))
    argv = list(flags)
    if config is not None:
        path = tmp_path / "accelerate.yaml"
        path.write_text(yaml.safe_dump(config))
        argv = ["--config_file", str(path), *argv]
    args = launch.launch_command_parser().parse_args([*argv, "src/train.py"])
    if config is not None and config["distributed_type"] == "DEEPSPEED":
        args, defaults, _ = launch._validate_launch_command(args)
        args.deepspeed_fields_from_accelerate_config = ",".join(defaults.deepspeed_config)
        exported.update(launch_env.prepare_deepspeed_cmd_env(args)[1])
    else:
        launch.launch_command(args)
    return {key: value for key, value in exported.items() if key.startswith(EXPORTED)}


def no_model(*args: object, **kwargs: object) -> None:
    """Stands in for ``load_model``: a refused accelerate setting must stop the run before the model loads."""
    raise AssertionError("the model loaded: the run started despite the accelerate config")


class Case(NamedTuple):
    """An accelerate config (None: none) with launch flags, the run's overrides, and what an error must name."""

    config: dict | None
    flags: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()
    named: tuple[str, ...] = ()


REFUSED = {
    "fp16": Case(
        {**MACHINE, "mixed_precision": "fp16"},
        named=(r"ACCELERATE_MIXED_PRECISION=fp16 \(accelerate config mixed_precision", r"model\.dtype"),
    ),
    "bf16_on_an_fp32_model": Case(
        {**MACHINE, "mixed_precision": "bf16"}, named=(r"ACCELERATE_MIXED_PRECISION=bf16", r"model\.dtype=float32")
    ),
    "dynamo": Case(
        {**MACHINE, "dynamo_config": {"dynamo_backend": "INDUCTOR"}},
        named=(r"ACCELERATE_DYNAMO_BACKEND=INDUCTOR", r"model\.compile_blocks"),
    ),
    "fsdp": Case(
        {**MACHINE, "distributed_type": "FSDP", "fsdp_config": {"fsdp_version": 2, "fsdp_offload_params": True}},
        named=(r"ACCELERATE_USE_FSDP=true", r"FSDP_OFFLOAD_PARAMS=true", r"distributed\.strategy=fsdp"),
    ),
    "deepspeed_with_accumulation": Case(
        {
            **MACHINE,
            "distributed_type": "DEEPSPEED",
            "deepspeed_config": {"zero_stage": 3, "gradient_accumulation_steps": 4},
        },
        named=(
            r"ACCELERATE_USE_DEEPSPEED=true",
            r"distributed\.strategy",
            r"GRADIENT_ACCUMULATION_STEPS=4",
            r"grad_accum",
        ),
    ),
    "cpu_for_a_cuda_model": Case(
        {**MACHINE, "distributed_type": "NO", "num_processes": 1, "use_cpu": True},
        overrides=("model.device=cuda",),
        named=(r"ACCELERATE_USE_CPU=True", r"model\.device=cuda"),
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_conflicting_accelerate_config_is_refused_before_any_work(tiny_env, tmp_path, monkeypatch, case) -> None:  # noqa: ANN001
    config, flags, overrides, named = REFUSED[case]
    for key, value in launched_env(tmp_path, monkeypatch, config, *flags).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(loop, "load_model", no_model)
    runs = tmp_path / "runs"
    with pytest.raises(ConfigError) as refused:
        loop.run(compose_train([*train_overrides(tiny_env, runs), *overrides]))
    for pattern in named:
        assert re.search(pattern, str(refused.value)), (pattern, str(refused.value))
    assert "\n" not in str(refused.value)
    assert not runs.exists(), "the refused run wrote into runs_root"


EXPORTED_BY_HAND = [
    ("ACCELERATE_USE_MEGATRON_LM", "true", r"distributed\.strategy"),
    ("ACCELERATE_USE_PARALLELISM_CONFIG", "true", r"distributed\.strategy"),
    ("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "2", r"grad_accum"),
]
"""Variables a user may export themselves (accelerate reads them whatever launched the script), with the key
the error must name."""


@pytest.mark.parametrize(("variable", "value", "key"), EXPORTED_BY_HAND)
def test_an_exported_accelerate_variable_is_refused(tiny_env, tmp_path, monkeypatch, variable, value, key) -> None:  # noqa: ANN001
    monkeypatch.setenv(variable, value)
    monkeypatch.setattr(loop, "load_model", no_model)
    with pytest.raises(ConfigError, match=rf"{variable}={value} .*{key}"):
        loop.run(compose_train(train_overrides(tiny_env, tmp_path / "runs")))


AGREEING = {
    "accelerate_launch_without_config": Case(None, flags=("--num_processes", "2")),
    "multi_gpu_without_config": Case(None, flags=("--multi_gpu", "--num_processes", "2")),
    "config_of_two_gpus": Case(MACHINE),
    "bf16_on_a_bf16_model": Case({**MACHINE, "mixed_precision": "bf16"}, overrides=("model.dtype=bfloat16",)),
    "cpu_on_a_cpu_model": Case(None, flags=("--cpu", "--num_processes", "2")),
}


@pytest.mark.parametrize("case", sorted(AGREEING))
def test_an_agreeing_accelerate_config_is_accepted(tiny_env, tmp_path, monkeypatch, case) -> None:  # noqa: ANN001
    from sparsectx.training.accelerate_config import check_accelerate_environment
    from sparsectx.training.config import load_train_config

    config, flags, overrides, _ = AGREEING[case]
    exported = launched_env(tmp_path, monkeypatch, config, *flags)
    assert exported, "accelerate exported nothing: the case checks nothing"
    tc = load_train_config(compose_train([*train_overrides(tiny_env, tmp_path), *overrides]))
    check_accelerate_environment(tc, exported)
    check_accelerate_environment(tc, {})  # torchrun: no accelerate variable at all


@pytest.mark.slow
def test_a_run_launched_without_config_trains(tiny_env, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """The variables of ``accelerate launch --num_processes 2`` without a config file leave the run as it was."""
    for key, value in launched_env(tmp_path, monkeypatch, None, "--num_processes", "2").items():
        monkeypatch.setenv(key, value)
    result = loop.run(compose_train([*train_overrides(tiny_env, tmp_path / "runs"), "steps=1"]))
    assert result.steps == 1
    assert (result.checkpoint / "model.safetensors").exists()


def test_an_accepted_bf16_leaves_the_precision_to_model_dtype(tiny_env, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """An agreeing ``mixed_precision: bf16`` adds nothing of accelerate's own: the Accelerator is built with its
    mixed precision off, which accelerate takes over the variable (``accelerate/state.py``,
    ``AcceleratorState.__init__``: the argument wins over ``ACCELERATE_MIXED_PRECISION``); the forwards autocast
    to ``model.dtype`` (``sparsectx.training.student``)."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    from sparsectx.training.accelerate_config import accelerator_arguments
    from sparsectx.training.config import load_train_config

    tc = load_train_config(compose_train([*train_overrides(tiny_env, tmp_path), "model.dtype=bfloat16"]))
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    AcceleratorState._reset_state(reset_partial_state=True)  # a fresh state reads the variable
    try:
        accelerator = Accelerator(**accelerator_arguments(tc))
        assert (accelerator.mixed_precision, accelerator.native_amp, accelerator.scaler) == ("no", False, None)
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
