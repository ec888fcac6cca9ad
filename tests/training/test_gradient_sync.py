"""Two processes (gloo on CPU) without sharding: the gradients are summed by DDP's reducer inside backward.

What is measured, on the real step (``loop.train_step``) of a full-parameter method (57 trainable tensors):
every synced gradient equals the per-tensor all-reduce sum it replaced (each rank's accumulated gradients,
``torch.distributed.all_reduce`` per tensor, op SUM) bit for bit; each gradient element is summed once per
optimizer step (two micro-batches, one sync); the sum takes fewer collectives than there are tensors; and with
buckets smaller than the model, the first collective is issued while backward still has gradients to produce.

A gradient collective is an ``all_reduce`` of a float32 tensor of more than one element: the step's other
all-reduces are the int64 normalisers, a one-element finiteness flag and the float64 statistics. DDP buckets
in the order gradients arrive from the second synced backward on (its first backward fills one bucket;
``torch/nn/parallel/distributed.py``, ``_BucketCapacityConfig.compute_bucket_size_limits``), so the
bucketed measurements are taken on the second step.
This module is also the worker script: ``torchrun --nproc_per_node 2 -m tests.training.test_gradient_sync ...``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

ROOT = Path(__file__).resolve().parents[2]
FULL_PARAMETER = [
    "method=lt_opd",
    "method.rollout.do_sample=false",
    "method.effective_batch_size=4",
    "micro_batch_size=1",
]
"""2 processes x 2 micro-batches of one sample; every weight of the tiny model trains (57 tensors, 0.66 MiB)."""
SMALL_BUCKET_MB = 0.1
"""A bucket cap well below the tiny model's 0.66 MiB of gradients, so that it takes several buckets."""
REBUILT = 2
"""The first optimizer step with DDP's rebuilt buckets."""


@contextmanager
def recorded_step(params: dict[str, torch.nn.Parameter]) -> Iterator[tuple[list[dict[str, Any]], dict[str, Any]]]:
    """Yields (the gradient collectives issued inside the block, each with whether it was issued inside backward
    and how many gradients backward had accumulated by then; each tensor's gradient as last accumulated).

    A tensor's post-accumulate hook runs inside ``AccumulateGrad`` before the node's post hooks, where DDP's
    reducer copies the gradient into its bucket (``torch/csrc/autograd/functions/accumulate_grad.h``,
    ``AccumulateGrad::apply``; ``torch/csrc/distributed/c10d/reducer.cpp``, ``Reducer::autograd_hook``), so
    the last one seen is this rank's gradient summed over its micro-batches and not yet over the processes.
    """
    accumulated = [0]
    local: dict[str, Any] = {}

    def seen(name: str) -> Callable[[torch.Tensor], None]:
        def hook(param: torch.Tensor) -> None:
            accumulated[0] += 1
            local[name] = param.grad.detach().clone()

        return hook

    handles = [param.register_post_accumulate_grad_hook(seen(name)) for name, param in params.items()]
    records: list[dict[str, Any]] = []
    real_all_reduce = dist.all_reduce

    def all_reduce(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if tensor.dtype == torch.float32 and tensor.numel() > 1:
            in_backward = torch._C._current_graph_task_id() != -1
            records.append({"numel": tensor.numel(), "accumulated": accumulated[0], "in_backward": in_backward})
        return real_all_reduce(tensor, *args, **kwargs)

    dist.all_reduce = all_reduce
    try:
        yield records, local
    finally:
        dist.all_reduce = real_all_reduce
        for handle in handles:
            handle.remove()


def per_tensor_sum(local: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Returns the sync that DDP replaced (``update.sync_gradients`` before issue 42): each rank's accumulated
    gradients summed over the processes by one all-reduce per tensor."""
    summed = {}
    for name, grad in local.items():
        total = grad.clone()
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        summed[name] = total
    return summed


def measured_steps(trainer: Any, steps: int) -> list[dict[str, Any]]:
    """Returns, per real optimizer step of ``trainer`` (``loop.train_step``), the per-tensor sum of its ranks'
    local gradients, the gradients it synced (taken when ``sync_gradients`` returns) and its gradient
    collectives."""
    from sparsectx.training import loop, update

    params = trainer.student.trainable
    real_sync = update.sync_gradients
    results = []
    for _ in range(steps):
        synced: dict[str, torch.Tensor] = {}

        def snapshot(trainer: Any, synced: dict[str, torch.Tensor] = synced) -> None:
            real_sync(trainer)
            synced.update({n: p.grad.detach().clone() for n, p in trainer.student.trainable.items()})

        update.sync_gradients = snapshot
        try:
            with recorded_step(params) as (collectives, local):
                loop.train_step(trainer)
        finally:
            update.sync_gradients = real_sync
        results.append(
            {
                "reference": per_tensor_sum(local),
                "synced": synced,
                "collectives": collectives,
                "tensors": len(params),
                "numel": sum(p.numel() for p in params.values()),
            }
        )
    return results


def two_process_trainer(env_root: Path, out: Path) -> Any:
    """Returns this rank's ``Trainer`` of the full-parameter config at step 0, its weights perturbed alike on
    every rank (a seeded generator)."""
    from accelerate import Accelerator

    from sparsectx.training import loop
    from sparsectx.training.batches import TrainingSet
    from sparsectx.training.config import load_train_config

    from .test_loop_support import TinyEnv, compose_train, train_overrides

    env = TinyEnv(env_root / "tiny-model", env_root / "train.tsv")
    tc = load_train_config(compose_train([*train_overrides(env, out), *FULL_PARAMETER]))
    accelerator = Accelerator(cpu=True)
    data = TrainingSet.load(tc.train_data, tc.seed, tc.method.effective_batch_size)
    trainer = loop.setup(tc, accelerator, tc.accumulation(accelerator.num_processes), data, out, None)
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in trainer.student.trainable.values():
            p.add_(0.05 * torch.randn(p.shape, generator=generator))
    return trainer


def worker(env_root: Path, out: Path, target: Path) -> None:
    """Runs both phases on this rank and saves rank 0's measurements to ``target`` after each: ``default``, one
    step of the trainer's own sync (DDP's default buckets: one, for this model), then ``small_buckets``, a second
    sync with small buckets on the same trainer, up to its first step with rebuilt buckets (the first sync's
    reducer stays hooked to the tensors, idle: it prepares no backward again)."""
    trainer = two_process_trainer(env_root, out)
    phases = {"default": measured_steps(trainer, 1)}
    if int(os.environ["RANK"]) == 0:
        torch.save(phases, target)
    from sparsectx.training.replication import GradientSync

    trainer.gradient_sync = GradientSync(trainer.student.trainable, bucket_cap_mb=SMALL_BUCKET_MB)
    phases["small_buckets"] = measured_steps(trainer, REBUILT)
    trainer.prefetch.close()
    if int(os.environ["RANK"]) == 0:
        torch.save(phases, target)


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, list[dict[str, Any]]], str]:
    """Returns (rank 0's measurements of both phases, the worker's stderr tail) of one 2-process torchrun."""
    from .test_loop_support import shared_env

    env_root = shared_env(tmp_path_factory).model_dir.parent
    root = tmp_path_factory.mktemp("gradient-sync")
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    paths = [str(env_root), str(root / "runs"), str(root / "grads.pt")]
    command = [*launcher, "-m", "tests.training.test_gradient_sync", *paths]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}:{ROOT / 'tests'}"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    saved = torch.load(root / "grads.pt") if (root / "grads.pt").exists() else {}
    return saved, f"torchrun exited {done.returncode}:\n{done.stderr[-3000:]}"


def gradient_collectives(step: dict[str, Any]) -> list[dict[str, Any]]:
    """Returns the step's gradient collectives, after checking that they summed each gradient element once."""
    collectives = step["collectives"]
    assert sum(c["numel"] for c in collectives) == step["numel"], "a gradient was summed more or less than once"
    return collectives


@pytest.mark.slow
def test_bucketed_sum_equals_the_per_tensor_sum_once_per_step(measured) -> None:  # noqa: ANN001
    phases, log = measured
    assert "default" in phases, log
    for phase, steps in phases.items():
        for index, step in enumerate(steps):
            for name, want in step["reference"].items():
                assert torch.equal(step["synced"][name], want), f"{phase} step {index + 1}: {name}"
            collectives = gradient_collectives(step)
            assert all(c["accumulated"] > step["tensors"] for c in collectives), "synced before the last micro-batch"
            assert len(collectives) < step["tensors"], f"{phase} step {index + 1}: {len(collectives)} collectives"


@pytest.mark.slow
def test_the_first_bucket_is_summed_while_backward_runs(measured) -> None:  # noqa: ANN001
    phases, log = measured
    assert "small_buckets" in phases, log
    rebuilt = phases["small_buckets"][REBUILT - 1]
    collectives = gradient_collectives(rebuilt)
    tensors = rebuilt["tensors"]
    assert len(collectives) > 1, f"small buckets gave {len(collectives)} collective: the cap did not split the buckets"
    assert len(collectives) < tensors, f"{len(collectives)} collectives for {tensors} tensors: nothing was bucketed"
    first = collectives[0]
    produced = 2 * rebuilt["tensors"]  # every tensor's gradient in each of the two micro-batches
    assert first["in_backward"] and produced - first["accumulated"] >= 2, (
        f"the first of {len(collectives)} collectives was issued after {first['accumulated']} of {produced} "
        "gradients: no overlap with backward"
    )


@pytest.fixture
def one_rank_group() -> Iterator[None]:
    """Yields inside a one-process gloo group (DDP needs one), destroyed afterwards."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_a_tensor_without_a_gradient_stops_the_step(one_rank_group) -> None:  # noqa: ANN001
    """A trained tensor that gets no gradient in the step's last backward holds back its bucket: the step stops,
    naming the tensors, instead of updating from gradients that were never summed."""
    from sparsectx.training.replication import GradientSync

    used, unused = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2))
    sync = GradientSync({"layer.used": used, "layer.unused": unused})
    with sync.loss_pass(synced=True):
        loss = (2 * used).sum()
    loss.backward()
    with pytest.raises(RuntimeError, match=r"did not sum the gradients of 2 trainable tensors .*layer\.unused"):
        sync.check_synced()
    alone = torch.nn.Parameter(torch.ones(3))  # a fresh tensor: the stopped step's reducer still waits on `used`
    sync = GradientSync({"layer.alone": alone})
    with sync.loss_pass(synced=True):
        loss = (2 * alone).sum()
    loss.backward()
    sync.check_synced()
    assert torch.equal(alone.grad, torch.full((3,), 2.0))  # one process: the sum is the gradient itself


if __name__ == "__main__":
    worker(*(Path(arg) for arg in sys.argv[1:4]))
