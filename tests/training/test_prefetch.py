"""``prefetch_host_inputs``: the next step's host inputs, built on a thread, are the on-demand ones, the steps
they feed are identical, and a failure in the thread surfaces at the step that needs the batch."""

from __future__ import annotations

import dataclasses
import re
import threading
from pathlib import Path

import pytest
import torch

from sparsectx.training import prefetch, update
from sparsectx.training.loop import train_step
from sparsectx.training.prefetch import HostPrefetch, host_inputs

from .test_loop_support import FROZEN, TinyEnv, make_trainer, shared_env


@pytest.fixture(scope="session")
def tiny_env(tmp_path_factory: pytest.TempPathFactory) -> TinyEnv:
    return shared_env(tmp_path_factory)


def _equal_batches(a, b) -> None:
    assert [p.sample_id for p in a.prompts] == [p.sample_id for p in b.prompts]
    assert sorted(a.batch.keys()) == sorted(b.batch.keys())
    for key in a.batch:
        assert torch.equal(a.batch[key], b.batch[key]), key


def test_a_prefetched_batch_equals_the_on_demand_one(tiny_env: TinyEnv, tmp_path: Path) -> None:
    trainer = make_trainer(tiny_env, tmp_path, *FROZEN)
    batches = update.step_batches(trainer, samples_seen=2)
    pool = HostPrefetch()
    try:
        pool.submit(trainer.cfg, trainer.student.processor, batches, pin=False)
        for batch in batches:
            _equal_batches(
                pool.take(trainer.cfg, trainer.student.processor, batch),
                host_inputs(trainer.cfg, trainer.student.processor, batch, pin=False),
            )
        assert pool._pending == {}
    finally:
        pool.close()


def test_steps_with_and_without_prefetch_are_identical(
    tiny_env: TinyEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads = []
    original = prefetch.host_inputs

    def spy(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return original(*args, **kwargs)

    monkeypatch.setattr(prefetch, "host_inputs", spy)
    runs = {}
    for flag in ("true", "false"):
        trainer = make_trainer(tiny_env, tmp_path / flag, *FROZEN, f"prefetch_host_inputs={flag}")
        metrics = [train_step(trainer)[0]]
        queued = set(trainer.prefetch._pending)
        metrics.append(train_step(trainer)[0])
        if flag == "true":  # step 1 queued exactly step 2's batches, and step 2 (the last) took them
            assert queued == {tuple(positions) for _, positions in update.step_batches(trainer, 2)}
            assert trainer.prefetch._pending == {}
        trainer.prefetch.close()
        runs[flag] = (metrics, {k: v.detach().clone() for k, v in trainer.student.trainable.items()})
    assert any(name.startswith("host-prefetch") for name in threads)  # step 2 (true) came from the thread
    assert runs["true"][0] == runs["false"][0]
    for name, tensor in runs["true"][1].items():
        assert torch.equal(tensor, runs["false"][1][name]), name


def test_a_failure_in_the_thread_is_raised_by_the_step_that_needs_it(
    tiny_env: TinyEnv, tmp_path: Path
) -> None:
    trainer = make_trainer(tiny_env, tmp_path, *FROZEN)
    (items, positions), *_ = update.step_batches(trainer, samples_seen=2)
    broken = [dataclasses.replace(items[0], image_bytes=b"not an image"), *items[1:]]
    with pytest.raises(Exception) as on_demand:
        host_inputs(trainer.cfg, trainer.student.processor, (broken, positions), pin=False)
    pool = HostPrefetch()
    try:
        pool.submit(trainer.cfg, trainer.student.processor, [(broken, positions)], pin=False)
        with pytest.raises(type(on_demand.value)) as prefetched:
            pool.take(trainer.cfg, trainer.student.processor, (broken, positions))
        address = lambda err: re.sub(r"0x[0-9a-f]+", "0x?", str(err))  # noqa: E731  (PIL names a buffer)
        assert address(prefetched.value) == address(on_demand.value)
    finally:
        pool.close()
