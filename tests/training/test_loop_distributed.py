"""Two processes (gloo on CPU, through Accelerate) x 2 micro-batches give the gradients of 1 process x 4.

The loss of each micro-batch is divided by counts summed over every micro-batch and process, and gradients are
summed over processes (``sparsectx.training.update``), so the synced gradient is the same whatever the split.
This module is also the worker script: ``torchrun --nproc_per_node 2 test_loop_distributed.py ...``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
OVERRIDES = [
    "method=scopd_plus",
    "method.positions.delta=0.3",
    "method.teacher.kind=frozen",
    "method.teacher.ema_decay=null",
    "method.effective_batch_size=4",
]


def synced_gradients(env_root: Path, out: Path, overrides: list[str]) -> tuple[dict[str, torch.Tensor], float]:
    """Returns this process's synced gradients of one step (student perturbed by a seed) and its loss."""
    from accelerate import Accelerator

    from sparsectx.training import loop
    from sparsectx.training.batches import TrainingSet
    from sparsectx.training.config import load_train_config
    from sparsectx.training.update import accumulate_gradients, sync_gradients

    from .test_loop_support import TinyEnv, compose_train, train_overrides

    env = TinyEnv(env_root / "tiny-model", env_root / "train.tsv")
    tc = load_train_config(compose_train([*train_overrides(env, out), *overrides]))
    accelerator = Accelerator(cpu=True)
    data = TrainingSet.load(tc.train_data, tc.seed, tc.method.effective_batch_size)
    trainer = loop.setup(tc, accelerator, tc.accumulation(accelerator.num_processes), data, out, None)
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in trainer.student.trainable.values():
            p.copy_(0.3 * torch.randn(p.shape, generator=generator))
    stats, _, _ = accumulate_gradients(trainer)
    sync_gradients(trainer)
    return {n: p.grad.detach().clone() for n, p in trainer.student.trainable.items()}, stats["loss"]


@pytest.mark.slow
def test_two_processes_match_one(tmp_path: Path) -> None:
    from .test_loop_support import build_env

    build_env(tmp_path / "env")
    single, loss = synced_gradients(tmp_path / "env", tmp_path / "one", [*OVERRIDES, "micro_batch_size=1"])
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "tests.training.test_loop_distributed",
        str(tmp_path / "env"),
        str(tmp_path / "two"),
        str(tmp_path / "grads.pt"),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}:{ROOT / 'tests'}"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    two = torch.load(tmp_path / "grads.pt")
    assert two["loss"] == pytest.approx(loss, rel=1e-5)
    for name, grad in single.items():
        torch.testing.assert_close(two["grads"][name], grad, atol=1e-7, rtol=1e-4, msg=name)


if __name__ == "__main__":
    env_root, out, target = (Path(arg) for arg in sys.argv[1:4])
    grads, local_loss = synced_gradients(env_root, out, [*OVERRIDES, "micro_batch_size=1"])
    total = torch.tensor([local_loss], dtype=torch.float64)
    torch.distributed.all_reduce(total)
    if int(os.environ["RANK"]) == 0:
        torch.save({"grads": grads, "loss": float(total)}, target)
