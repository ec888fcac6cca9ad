"""``distributed.strategy=fsdp`` on two processes (gloo on CPU) against the one-process run.

One FSDP step of a LoRA method and of a full-parameter method exports the same weights as the one-process,
unsharded run on the same global batch (the step's gradient is the summed ∇L either way; the sharded run also
recomputes its decoder layers in backward, ``memory.activation_checkpointing``, which changes no number), and
a two-process run killed after its first saved state resumes from its shards to the final weights of an
unkilled one.
This module is also the worker script: ``torchrun --nproc_per_node 2 -m tests.training.test_fsdp ...``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[2]
FSDP = ["distributed.strategy=fsdp"]
LR = 0.001
SCOPD_PLUS = [
    "method=scopd_plus",
    "method.positions.delta=0.3",
    "method.teacher.kind=frozen",
    "method.teacher.ema_decay=null",
    f"method.optim.lr={LR}",
]
LORA = [*SCOPD_PLUS, "steps=1"]
FULL = ["method=lt_opd", "method.rollout.do_sample=false", "steps=1", f"method.optim.lr={LR}"]
RESUME = [
    "method=scopd_plus",
    "method.positions.delta=0.3",
    "method.teacher.ema_decay=0.5",
    "steps=3",
    "save_every=2",
    "method.optim.lr=0.01",
]
# the EMA teacher of step 3 is an average that only the shards hold (decay 0.5: far from the live weights)
METRICS = "metrics.json"
"""The two-process run's last metrics and optimizer updates done, written by its main process beside the run
directories."""
KILLED = 137
"""The exit status of a worker that dies after its step-2 gradients (SIGKILL's, as a scheduler's kill)."""


def launch(
    env_root: Path, runs_root: Path, overrides: list[str], die_at: int | None = None, processes: int = 2
) -> None:
    """Returns None after a multi-process ``loop.run`` (torchrun, gloo) of the shrunk config finished, or with
    ``die_at`` after all of its processes were killed at that step."""
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        str(processes),
        "-m",
        "tests.training.test_fsdp",
        str(env_root),
        str(runs_root),
        str(die_at or 0),
        *overrides,
    ]
    path = os.pathsep.join([str(ROOT / "src"), str(ROOT), str(ROOT / "tests")])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    killed = done.returncode != 0 and done.stderr.count(f"exitcode  : {KILLED}") == processes
    if (killed, done.returncode == 0) != (bool(die_at), not die_at):
        pytest.fail(f"torchrun exited {done.returncode} (die_at={die_at}):\n{done.stderr[-4000:]}")


def exported(runs_root: Path) -> dict[str, torch.Tensor]:
    """Returns the tensors of the run's exported ``checkpoint/`` (a plain HF directory)."""
    run_dir = next(runs_root.glob("*/*/*/*/*"))
    return load_file(str(run_dir / "checkpoint" / "model.safetensors"))


def one_process(
    env_root: Path, runs_root: Path, overrides: list[str]
) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """Returns the exported weights and last metrics of the one-process, unsharded run of the shrunk config."""
    from sparsectx.training import loop

    from .test_loop_support import TinyEnv, compose_train, train_overrides

    env = TinyEnv(env_root / "tiny-model", env_root / "train.tsv")
    result = loop.run(compose_train([*train_overrides(env, runs_root), *overrides]))
    return exported(runs_root), result.metrics


@pytest.mark.slow
@pytest.mark.parametrize("method", [LORA, FULL], ids=["scopd_plus_lora", "lt_opd_full_parameter_and_tower"])
def test_one_fsdp_step_equals_one_process(method: list[str], tmp_path: Path) -> None:
    from .test_loop_support import build_env

    build_env(tmp_path / "env")
    single, metrics = one_process(tmp_path / "env", tmp_path / "one", method)
    launch(tmp_path / "env", tmp_path / "two", [*method, *FSDP, "memory.activation_checkpointing=true"])
    sharded = exported(tmp_path / "two")
    two = json.loads((tmp_path / "two" / METRICS).read_text())
    for key in ("train/loss", "train/grad_norm"):  # the norm tells a sum from a mean (Adam's step cannot)
        assert two[key] == pytest.approx(metrics[key], rel=1e-5), key
    base = load_file(str(tmp_path / "env" / "tiny-model" / "model.safetensors"))
    assert sharded.keys() == single.keys()
    moved = [name for name in single if not torch.equal(single[name], base[name])]
    assert moved, "the step changed no weight: nothing was compared"
    for name, weight in single.items():
        torch.testing.assert_close(sharded[name], weight, atol=1e-6, rtol=1e-5, msg=name)


@pytest.mark.slow
def test_bf16_checkpoint_keeps_fp32_master_shards(tmp_path: Path) -> None:
    """With a bf16 checkpoint each unit gathers in bf16 and reduces in fp32 (``MixedPrecisionPolicy``) where
    the one-process run autocasts: the shards hold fp32 master weights, the export is bf16, and the step agrees
    with the one-process run to bf16 precision (the two round in different places)."""
    from .test_loop_support import build_env

    build_env(tmp_path / "env")
    bf16 = [*FULL, "model.dtype=bfloat16"]
    single, metrics = one_process(tmp_path / "env", tmp_path / "one", bf16)
    launch(tmp_path / "env", tmp_path / "two", [*bf16, *FSDP])
    run_dir = next((tmp_path / "two").glob("*/*/*/*/*"))
    shards = dcp.FileSystemReader(run_dir / "state" / "shards").read_metadata().state_dict_metadata
    trained = [key for key in shards if key.startswith("model.")]
    assert trained and {shards[key].properties.dtype for key in trained} == {torch.float32}
    two, sharded = json.loads((tmp_path / "two" / METRICS).read_text()), exported(tmp_path / "two")
    assert two["train/loss"] == pytest.approx(metrics["train/loss"], rel=5e-2)  # a small divergence of bf16 logits
    assert two["train/grad_norm"] == pytest.approx(metrics["train/grad_norm"], rel=5e-2)
    base = load_file(str(tmp_path / "env" / "tiny-model" / "model.safetensors"))
    differ = moved = 0.0
    for name, weight in single.items():
        assert sharded[name].dtype == weight.dtype == torch.bfloat16, name
        # one bf16 step apart where the fp32 masters round across a boundary; where a gradient is ~0 the two
        # roundings can give Adam's first step (±lr per element) opposite signs: at most 2·lr
        torch.testing.assert_close(sharded[name], weight, atol=2 * LR, rtol=2**-7)
        differ += float((sharded[name] - weight).float().abs().sum())
        moved += float((weight - base[name]).float().abs().sum())
    assert differ <= 0.05 * moved  # such elements are few: the two steps agree overall


@pytest.mark.slow
@pytest.mark.long  # 39 s: make test-long (test_shards_resume_on_another_process_count resumes shards in CI)
def test_killed_two_process_run_resumes_to_the_same_weights(tmp_path: Path) -> None:
    from .test_loop_support import build_env

    build_env(tmp_path / "env")
    launch(tmp_path / "env", tmp_path / "straight", [*RESUME, *FSDP])
    launch(tmp_path / "env", tmp_path / "killed", [*RESUME, *FSDP], die_at=2)  # state/ holds step 2
    run_dir = next((tmp_path / "killed").glob("*/*/*/*/*"))
    assert (run_dir / "state" / "shards").is_dir() and not (run_dir / "checkpoint").exists()
    launch(tmp_path / "env", tmp_path / "killed", [*RESUME, *FSDP])
    assert json.loads((tmp_path / "killed" / METRICS).read_text())["updates"] == 1  # resumed at step 2
    straight, resumed = exported(tmp_path / "straight"), exported(tmp_path / "killed")
    for name, weight in straight.items():
        assert torch.equal(resumed[name], weight), name


@pytest.mark.slow
def test_shards_resume_on_another_process_count(tmp_path: Path) -> None:
    """A two-process state resumed on three processes (the shards reshard) ends at the one-process run's
    weights: greedy rollouts and a frozen teacher use no per-process random stream."""
    from .test_loop_support import build_env

    build_env(tmp_path / "env")
    common = [*SCOPD_PLUS, "steps=2", "save_every=1", "method.effective_batch_size=6"]
    single, _ = one_process(tmp_path / "env", tmp_path / "one", common)
    launch(tmp_path / "env", tmp_path / "two", [*common, *FSDP], die_at=1)  # state/ holds step 1
    launch(tmp_path / "env", tmp_path / "two", [*common, *FSDP], processes=3)
    assert json.loads((tmp_path / "two" / METRICS).read_text())["updates"] == 1
    resumed = exported(tmp_path / "two")
    for name, weight in single.items():
        torch.testing.assert_close(resumed[name], weight, atol=1e-6, rtol=1e-5, msg=name)


def worker(env_root: Path, runs_root: Path, die_at: int, overrides: list[str]) -> None:
    """Runs ``loop.run`` on this process; with ``die_at`` > 0 every process exits with ``KILLED`` after the
    gradients of optimizer step ``die_at`` (0-based), before its update: state/ holds step ``die_at``."""
    from sparsectx.training import loop

    from .test_loop_support import TinyEnv, compose_train, train_overrides

    real, updates = loop.apply_update, []

    def counted(trainer: loop.Trainer) -> float:
        if die_at and trainer.step == die_at:
            os._exit(KILLED)
        updates.append(trainer.step)
        return real(trainer)

    loop.apply_update = counted
    env = TinyEnv(env_root / "tiny-model", env_root / "train.tsv")
    result = loop.run(compose_train([*train_overrides(env, runs_root), *overrides]))
    if int(os.environ["RANK"]) == 0:
        (runs_root / METRICS).write_text(json.dumps({**result.metrics, "updates": len(updates)}))


if __name__ == "__main__":
    worker(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4:])
