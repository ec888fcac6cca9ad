"""Bad inputs for several processes and ``distributed.strategy``: each is an error naming the numbers and the
fix, raised before the model loads (the multi-process runs themselves are in ``test_fsdp``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sparsectx.paths import run_dir
from sparsectx.training import checkpoint as ckpt
from sparsectx.training import loop
from sparsectx.training.config import load_train_config
from sparsectx.training.sharded_state import check_strategy

from .test_loop_support import TinyEnv, compose_train, shared_env, train_overrides


@pytest.fixture(scope="session")
def tiny_env(tmp_path_factory: pytest.TempPathFactory) -> TinyEnv:
    """Returns the session's tiny model directory and training TSV."""
    return shared_env(tmp_path_factory)


def load(env: TinyEnv, root: Path, *overrides: str):  # noqa: ANN201
    """Returns the checked ``TrainConfig`` of the shrunk run with ``overrides``."""
    return load_train_config(compose_train([*train_overrides(env, root), *overrides]))


def test_more_processes_than_samples_in_a_step(tiny_env, tmp_path) -> None:  # noqa: ANN001
    cfg = load(tiny_env, tmp_path, "method.effective_batch_size=2")
    with pytest.raises(ValueError, match=r"4 processes for method\.effective_batch_size=2 .*at most 2 processes"):
        cfg.accumulation(processes=4)


def test_a_batch_that_does_not_divide_over_the_processes(tiny_env, tmp_path) -> None:  # noqa: ANN001
    cfg = load(tiny_env, tmp_path, "method.effective_batch_size=6", "micro_batch_size=2")
    with pytest.raises(ValueError, match=r"processes \(2\) x micro_batch_size \(2\).*one of \[1, 3\]"):
        cfg.accumulation(processes=2)
    cfg = load(tiny_env, tmp_path, "method.effective_batch_size=5")
    with pytest.raises(ValueError, match=r"5 samples do not divide over 2 processes"):
        cfg.accumulation(processes=2)
    assert load(tiny_env, tmp_path, "method.effective_batch_size=6").accumulation(processes=2) == 3


def test_an_unknown_strategy_is_refused_by_name(tiny_env, tmp_path) -> None:  # noqa: ANN001
    with pytest.raises(ValueError, match=r"distributed\.strategy"):
        load(tiny_env, tmp_path, "distributed.strategy=zero3")


@pytest.mark.parametrize("key", ["engine.compile", "model.compile_blocks"])
def test_compilation_under_fsdp_is_eager(tiny_env, tmp_path, key: str) -> None:  # noqa: ANN001
    """``auto`` settles to ``off`` under fsdp (the sharded units' figures are eager); ``on`` is refused by name."""
    name = re.escape(key)
    with pytest.raises(ValueError, match=rf"{name}=on with distributed\.strategy=fsdp: .*set {name}=off"):
        load(tiny_env, tmp_path, "distributed.strategy=fsdp", f"{key}=on")
    section, attr = key.split(".")
    sharded = load(tiny_env, tmp_path, "distributed.strategy=fsdp", f"{key}=auto")
    replicated = load(tiny_env, tmp_path, f"{key}=auto")
    assert (getattr(getattr(sharded, section), attr), getattr(getattr(replicated, section), attr)) == ("off", "auto")


def test_teacher_offload_needs_the_whole_model(tiny_env, tmp_path) -> None:  # noqa: ANN001
    with pytest.raises(ValueError, match=r"memory\.teacher_offload=true with distributed\.strategy=fsdp"):
        load(tiny_env, tmp_path, "distributed.strategy=fsdp", "method=lt_opd", "memory.teacher_offload=true")


def no_model(*args: object, **kwargs: object) -> None:
    """Stands in for ``load_model``: a bad setting must fail before the model loads."""
    raise AssertionError("the model must not load when the setting is refused")


def fake_state(where: Path, processes: int, sharding: str | None) -> dict:
    """Returns the ``meta.json`` written into ``where/state`` for a state of ``processes`` processes."""
    meta = {
        "step": 1,
        "samples_seen": 2,
        "wandb_id": None,
        "config_hash": "x",
        "defining": {},
        "resolved": {},
        "processes": processes,
    }
    if sharding is not None:
        meta["sharding"] = sharding
    ckpt.save_state(where / "state", {"step": 1, "samples_seen": 2}, meta)
    return ckpt.read_meta(where / "state")


def test_a_sharded_state_resumed_unsharded_names_the_saved_count(tiny_env, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    cfg = compose_train(train_overrides(tiny_env, tmp_path))
    tc = load_train_config(cfg)
    where = run_dir(tc.runs_root, tc.experiment, tc.model.name, tc.method.name, tc.pruner.name, tc.budget)
    fake_state(where, processes=4, sharding="fsdp")
    monkeypatch.setattr(loop, "load_model", no_model)
    saved = r"saved with distributed\.strategy=fsdp by 4 processes.*Resume with distributed\.strategy=fsdp"
    with pytest.raises(ValueError, match=saved):
        loop.run(cfg)


def test_an_unsharded_state_is_not_loaded_as_shards(tmp_path) -> None:  # noqa: ANN001
    meta = fake_state(tmp_path, processes=1, sharding=None)  # written before strategies existed: none
    with pytest.raises(ValueError, match=r"distributed\.strategy=none by 1 processes; this run has "):
        check_strategy(meta, "fsdp", 2, tmp_path / "state")
    check_strategy(meta, "none", 2, tmp_path / "state")  # none: any process count
    check_strategy(fake_state(tmp_path, processes=4, sharding="fsdp"), "fsdp", 2, tmp_path / "state")  # resharded


def test_kept_rollouts_name_the_saved_process_count(tmp_path) -> None:  # noqa: ANN001
    meta = {**fake_state(tmp_path, processes=2, sharding=None), "rollouts_kept": True}
    with pytest.raises(ValueError, match=r"rollouts of 2 processes.*this run has 1: resume with 2 processes"):
        check_strategy(meta, "none", 1, tmp_path / "state")
    check_strategy(meta, "none", 2, tmp_path / "state")
