"""The one training loop every method runs: ``run(cfg)`` is what ``src/train.py`` and the tests call.

Per optimizer step (training-methods spec §1.1): budget b from the schedule; for each micro-batch encode once,
prune at b (and b+δ), get the prefix (student rollout or reference); count the step's normalisers; then per
micro-batch the teacher pass (no_grad), the student pass (grad) and the loss (with ``memory.teacher_offload``
the teacher passes of all micro-batches come first, in one phase); sync, clip, update, EMA. Every
``save_every`` steps ``state/`` is written atomically; at the end ``checkpoint/`` holds the loadable model.
Killing the run at any point and starting it again with the same config resumes from ``state/`` and reaches
the same final weights (tested); changing a run-defining key is an error naming the key. The main process holds
the run directory with a lock file (``train.lock``, ``sparsectx.locks``) for the whole job, so a second trainer
of the same run is refused at once, and keeps it private (0700) unless ``run_dir_permissions=umask``. Under
``method.rl.num_iterations`` = μ > 1 a step that reuses rollouts skips the prefix (``update.reused_step``) and
consumes no samples; the kept rollouts travel in ``state/`` so a resume between reuse steps continues them.

SIGINT/SIGTERM (Ctrl-C, a scheduler's kill) finish the current optimizer step, write ``state/`` for it and
raise ``TrainingStoppedError`` (``src/train.py`` exits non-zero saying rerunning resumes); a second signal
aborts at once (``KeyboardInterrupt``), leaving the last saved state. Every process of a multi-process run
installs the handlers and the processes agree after each step (one all-reduce of a stop flag), so all stop
at the same step, also when the launcher signals only some of them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import resource
import signal
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from omegaconf import DictConfig, OmegaConf, open_dict
from tqdm.auto import tqdm

from sparsectx.checkpoints import recover_dir
from sparsectx.io import append_jsonl, atomic_write_text, read_jsonl
from sparsectx.locks import exclusive
from sparsectx.models import load_model
from sparsectx.models.loading import check_device, resolve_checkpoint
from sparsectx.paths import budget_tag, path_name, run_dir, step_log_path, token_trace_path
from sparsectx.protocol.runlog import run_deviations
from sparsectx.pruning import declared_signals
from sparsectx.redact import redact
from sparsectx.run_tags import AUTO, resolved_tag, run_label, typed_overrides
from sparsectx.seeding import derive_seed
from sparsectx.tracking import NullTracker, Tracker, start_run
from sparsectx.training import checkpoint as ckpt
from sparsectx.training.accelerate_config import accelerator_arguments, check_accelerate_environment
from sparsectx.training.batches import TrainingSet, require_training_file
from sparsectx.training.config import TrainConfig, load_train_config, run_defining
from sparsectx.training.contexts import MicroBatch
from sparsectx.training.decode_copy import shard_keeping_twin
from sparsectx.training.determinism import apply_determinism
from sparsectx.training.lora_export import ADAPTER_DIR
from sparsectx.training.memory import apply_memory
from sparsectx.training.run_files import log_checkpoint, restore, save, write_checkpoint
from sparsectx.training.samples import TABLE_COLUMNS, sample_rows
from sparsectx.training.sharded_state import check_strategy
from sparsectx.training.sharding import process_group
from sparsectx.training.student import build_student
from sparsectx.training.token_trace import step_trace
from sparsectx.training.update import (
    Trainer,
    accumulate_gradients,
    apply_update,
    build_optimizer,
    generates,
    reduce_stats,
    rollout_iterations,
    step_metrics,
)

log = logging.getLogger(__name__)

OmegaConf.register_new_resolver("budget_tag", budget_tag, replace=True)
# Each name in hydra.run.dir passes path_name first: Hydra creates that folder before main() runs.
OmegaConf.register_new_resolver("path_name", path_name, replace=True)


@dataclass
class RunResult:
    """What a finished ``run`` returns."""

    run_dir: Path
    """``<runs_root>/<experiment>/<model>/<method>/<pruner>/<budget>``."""
    checkpoint: Path
    """The loadable final model directory: ``checkpoint/``, or ``adapter/`` when ``save_merged=false`` left no
    merged copy."""
    steps: int
    """Optimizer steps done."""
    samples_seen: int
    """Training samples consumed over all processes (a step that reuses rollouts consumes none)."""
    metrics: dict[str, float]
    """The last step's metrics ({} when the run was already complete)."""


def run(cfg: DictConfig) -> RunResult:
    """Returns the finished run after training (or resuming) the method ``cfg`` describes.

    The config is checked completely before the model loads, accelerate's exported settings against it first
    (``sparsectx.training.accelerate_config``); a resume state with different run-defining keys raises before
    any work. A NaN/inf loss raises ``NonFiniteLossError`` and leaves the last good state.
    """
    cfg = with_resolved_run_tag(cfg)
    tc = load_train_config(cfg)
    check_accelerate_environment(tc, os.environ)  # accelerate launch's exported settings against this config
    require_training_file(tc.train_data)  # before anything is loaded or written
    tc.pruner.check_model(resolve_checkpoint(tc.model))  # an in-LLM K against the LLM's depth, from config.json alone
    check_device(tc.model.device)  # before Accelerator, which would fall back to the CPU without a word
    resolved: dict[str, Any] = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
    accelerator = Accelerator(**accelerator_arguments(tc))  # mixed precision off: model.dtype decides
    if accelerator.is_main_process:  # a paper-stated setting this run changes: the protocol card lists it too
        for line in run_deviations(cfg, "train"):
            log.warning("protocol: %s", line)
    accum = tc.accumulation(accelerator.num_processes)
    label = run_label(tc.method.name, tc.run_tag)
    out = run_dir(tc.runs_root, tc.experiment, tc.model.name, label, tc.pruner.name, tc.budget)
    defining = run_defining(resolved)
    with held_run_dir(accelerator, out, tc.run_dir_permissions):
        meta = read_resume_meta(accelerator, out, tc.steps)
        if meta is not None:
            check_strategy(meta, tc.distributed.strategy, accelerator.num_processes, out / "state")
            # meta.json holds redacted copies (run_files.save): compare redacted copies on both sides
            for warning in ckpt.check_resume(redact(meta), redact(defining), redact(resolved), out):
                log.warning(warning)
        with process_group(tc.distributed.strategy, accelerator.device):  # fsdp on one process: one rank
            return train_to_end(tc, accelerator, accum, out, meta, defining, resolved)


def with_resolved_run_tag(cfg: DictConfig) -> DictConfig:
    """Returns ``cfg`` with ``run_tag: auto`` replaced by the tag it stands for (``sparsectx.run_tags``), so the
    run's ``config.yaml`` records the name its directory carries (evaluation reads it back)."""
    if cfg.run_tag != AUTO:
        return cfg
    cfg = cfg.copy()
    with open_dict(cfg):
        cfg.run_tag = resolved_tag(AUTO, cfg.grid, typed_overrides())
    return cfg


RUN_LOCK = "train.lock"
"""The lock file a training job holds in its run directory (``sparsectx.locks``)."""


@contextmanager
def held_run_dir(accelerator: Accelerator, out: Path, permissions: str) -> Iterator[None]:
    """Holds the run directory ``out`` for the block: made private (``guard_run_dir``) and locked by the main
    process, so that a second trainer of the same run is refused at once (``sparsectx.locks.LockHeldError``)."""
    if not accelerator.is_main_process:  # the other processes of this run write under the main one's lock
        yield
        return
    out.mkdir(mode=0o700 if permissions == "private" else 0o777, parents=True, exist_ok=True)
    with exclusive(out / RUN_LOCK, "training run", f"the run directory {out}"):
        guard_run_dir(out, permissions)
        yield


def guard_run_dir(out: Path, permissions: str) -> None:
    """Returns None; under ``run_dir_permissions=private`` the run directory ``out`` is made 0700 (``umask``:
    left as the user's umask made it).

    Hydra and Snakemake create it first, with the user's umask, so an existing directory is taken back to 0700.
    A private run refuses a directory owned by another user, and a resume state (loaded into the run on resume)
    in a directory that other users can write, since one of them could have written it.
    """
    if permissions == "umask":
        return
    found = out.stat()
    if found.st_uid != os.getuid():
        raise PermissionError(
            f"{out} belongs to uid {found.st_uid}, not to you (uid {os.getuid()}): run_dir_permissions=private "
            "trains only in your own run directory; use another runs_root, or set run_dir_permissions=umask"
        )
    if found.st_mode & 0o022 and (out / "state").exists():
        raise PermissionError(
            f"{out} is writable by other users (mode {stat.S_IMODE(found.st_mode):o}) and holds a resume state "
            f"that one of them could have written (a resume loads it). Check {out / 'state'}, then "
            f"`chmod 700 {out}` and rerun; or delete {out / 'state'} to start over; or set "
            "run_dir_permissions=umask to share run directories with your group"
        )
    if stat.S_IMODE(found.st_mode) != 0o700:
        out.chmod(0o700)


def train_to_end(
    tc: TrainConfig,
    accelerator: Accelerator,
    accum: int,
    out: Path,
    meta: dict[str, Any] | None,
    defining: dict[str, Any],
    resolved: dict[str, Any],
) -> RunResult:
    """Returns the finished run after building (or restoring) the trainer, training its remaining steps and
    exporting ``checkpoint/``; the tracker and the prefetch thread are closed however it ends."""
    data = TrainingSet.load(tc.train_data, tc.seed, tc.method.effective_batch_size)
    trainer = setup(tc, accelerator, accum, data, out, meta)
    if accelerator.is_main_process:
        atomic_write_text(out / "config.yaml", OmegaConf.to_yaml(redact(resolved)))  # credentials out
    tracker = open_tracker(tc, resolved, trainer)
    try:
        metrics = train(trainer, tracker, out, defining, resolved)
        expected = expected_samples(tc)
        if trainer.step != tc.steps or trainer.samples_seen != expected:
            raise RuntimeError(
                f"run ended at step {trainer.step} with {trainer.samples_seen} samples seen; expected "
                f"{tc.steps} and {expected}"
            )
        write_checkpoint(trainer, out, defining)
        log_checkpoint(tracker, trainer, out, defining)
    finally:
        trainer.prefetch.close()
        tracker.finish()
    final = out / "checkpoint"
    if not tc.save_merged and not final.exists():  # save_merged=false: the adapter is the run's model
        final = out / ADAPTER_DIR
    return RunResult(out, final, trainer.step, trainer.samples_seen, metrics)


def expected_samples(tc: TrainConfig) -> int:
    """Returns the samples a finished run has consumed: ``effective_batch_size`` per step that takes new
    prompts, i.e. ceil(steps / μ) of them under ``method.rl.num_iterations`` = μ (μ = 1: every step)."""
    return -(-tc.steps // rollout_iterations(tc)) * tc.method.effective_batch_size


def metric_line(metrics: dict[str, float]) -> str:
    """Returns the step's metrics as one sorted ``key=value`` line (4 significant digits) for ``train.log``."""
    return " ".join(f"{key}={value:.4g}" for key, value in sorted(metrics.items()))


class TrainingStoppedError(Exception):
    """A signal stopped the run after a completed step whose resume state was saved."""

    def __init__(self, signum: int, step: int, steps: int, state: Path) -> None:
        self.signum, self.step, self.steps, self.state = signum, step, steps, state
        super().__init__(
            f"stopped by {signal.Signals(signum).name} after step {step} of {steps}; resume state saved in "
            f"{state}; rerun the same command to resume"
        )


class StopRequest:
    """The signal, if any, that asked the run to stop after the current step."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def handle(self, signum: int, frame: Any) -> None:  # noqa: ARG002
        """Returns None after recording the first signal; raises ``KeyboardInterrupt`` on a second."""
        if self.signum is not None:
            raise KeyboardInterrupt(f"second {signal.Signals(signum).name}: aborting without saving")
        self.signum = signum
        log.warning(
            "%s: stopping after the current step and saving its resume state (send again to abort at once)",
            signal.Signals(signum).name,
        )

    def agreed(self, accelerator: Accelerator) -> int | None:
        """Returns the stop signal if any process got one (all processes get the same answer)."""
        if accelerator.num_processes == 1:
            return self.signum
        flag = torch.tensor([self.signum or 0], device=accelerator.device)
        signum = int(accelerator.reduce(flag, reduction="max").item())
        return signum or None


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def stop_on_signals() -> Iterator[StopRequest]:
    """Yields a ``StopRequest`` that SIGINT/SIGTERM set (main thread only), then restores the old handlers."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request  # signal handlers can only be installed from the main thread
        return
    previous = {signum: signal.signal(signum, request.handle) for signum in STOP_SIGNALS}
    try:
        yield request
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def read_resume_meta(accelerator: Accelerator, out: Path, steps: int) -> dict[str, Any] | None:
    """Returns the verified resume state's ``meta.json`` (the main process first repairs interrupted swaps).

    A damaged state (payload without readable metadata, or not matching it) raises ``DamagedFileError``.
    """
    if accelerator.is_main_process:
        recover_dir(out / "state")
        recover_dir(out / "checkpoint")
    accelerator.wait_for_everyone()
    meta = ckpt.read_meta(out / "state")
    if meta is not None and meta["step"] > steps:
        raise ValueError(
            f"steps={steps} is below the {meta['step']} optimizer steps already done in {out / 'state'}; "
            f"set steps >= {meta['step']} or use a new experiment name"
        )
    return meta


def setup(
    tc: TrainConfig,
    accelerator: Accelerator,
    accum: int,
    data: TrainingSet,
    out: Path,
    meta: dict[str, Any] | None,
) -> Trainer:
    """Returns the ``Trainer``: model, teacher parts and optimizer, restored from ``state/`` if present."""
    apply_determinism(tc.deterministic)
    torch.manual_seed(derive_seed(tc.seed, "init"))  # LoRA's A initialisation; overwritten on resume
    model_cfg = dataclasses.replace(tc.model, device=str(accelerator.device))
    student = build_student(load_model(model_cfg), tc.method, tc.model.signal_chunk)
    student.adapter.vision_signals = declared_signals(tc.pruner.name, tc.pruner.params, tc.seed)
    apply_memory(student, tc.memory)
    if tc.distributed.strategy == "fsdp":
        shard_keeping_twin(student, tc.rollout_weights, tc.teacher_weights, tc.model.signal_chunk, accelerator.device)
    optimizer, scheduler = build_optimizer(tc, student)
    trainer = Trainer(tc, accelerator, student, data, optimizer, scheduler, accum, 0, 0, None)
    if meta is not None:
        payload = ckpt.load_state(out / "state", accelerator.device, meta)
        restore(trainer, payload, out / "state", meta)
        log.info("resumed %s at step %d (%d samples seen)", out, trainer.step, trainer.samples_seen)
    return trainer


def open_tracker(tc: TrainConfig, resolved: dict[str, Any], trainer: Trainer) -> Tracker:
    """Returns the run's tracker on the main process, a null tracker elsewhere.

    Its W&B run is the one its state names (``Trainer.wandb_id``), else the one the run's cell names
    (``sparsectx.tracking.run_id``: model, method label, pruner, budget, seed), so a resumed or rerun training
    continues its run; the id is kept in the state.
    """
    if not trainer.accelerator.is_main_process:
        return NullTracker()
    label = run_label(tc.method.name, tc.run_tag)
    tracker = start_run(
        tc.logger,
        name=f"{tc.model.name}/{label}/{tc.pruner.name}/b{budget_tag(tc.budget)}/s{tc.seed}",
        group=tc.experiment,
        job_type="train",
        tags=[],
        config=resolved,
        resume_id=trainer.wandb_id,
        cell={
            "model": tc.model.name,
            "method": tc.method.name,
            "run_tag": tc.run_tag or None,
            "pruner": tc.pruner.name,
            "budget": budget_tag(tc.budget),
            "seed": tc.seed,
        },
    )
    trainer.wandb_id = getattr(tracker, "run_id", None)
    return tracker


def train_step(trainer: Trainer) -> tuple[dict[str, float], list[MicroBatch], float]:
    """Returns (metrics, micro-batches, budget) of one optimizer step; advances the step and, on a step that
    took new prompts, the data position (``Trainer.samples_seen``). Kept rollouts are dropped after the last
    step that reuses them."""
    lr = float(trainer.scheduler.get_last_lr()[0])  # a tensor under torchao's AdamW8bit
    fresh = generates(trainer)
    totals, micro, budget = accumulate_gradients(trainer)
    grad_norm = apply_update(trainer)
    trainer.step += 1
    if fresh:
        trainer.samples_seen += trainer.cfg.method.effective_batch_size
    if generates(trainer):
        trainer.rollouts = None
    return step_metrics(reduce_stats(trainer, totals), budget, lr, grad_norm), micro, budget


def peak_memory_gb(device: torch.device) -> float:
    """Returns peak accelerator memory (CUDA) or the process's peak resident memory (CPU), in GB."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 1e9
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # Linux reports KiB


def trim_step_log(path: Path, step: int) -> None:
    """Returns None after cutting the per-step log ``path`` to its records of steps 1..``step`` (the resumed
    state's): a resumed run appends the steps after it again; a fresh run (``step`` 0) starts it empty."""
    if path.is_file():
        kept = [row for row in read_jsonl(path) if row["step"] <= step]
        atomic_write_text(path, "".join(json.dumps(row, sort_keys=True) + "\n" for row in kept))


def train(
    trainer: Trainer, tracker: Tracker, out: Path, defining: dict[str, Any], resolved: dict[str, Any]
) -> dict[str, float]:
    """Returns the last step's metrics after running the remaining optimizer steps (logging and saving).

    A SIGINT/SIGTERM lets the current step finish, saves its state and raises ``TrainingStoppedError``.
    """
    with stop_on_signals() as stop:
        return train_until_stopped(trainer, tracker, out, defining, resolved, stop)


def train_until_stopped(
    trainer: Trainer,
    tracker: Tracker,
    out: Path,
    defining: dict[str, Any],
    resolved: dict[str, Any],
    stop: StopRequest,
) -> dict[str, float]:
    """Returns the last step's metrics (see ``train``); checks ``stop`` after every completed step."""
    tc, main = trainer.cfg, trainer.accelerator.is_main_process
    bar = tqdm(total=tc.steps, initial=trainer.step, disable=not main, desc=f"{tc.method.name} b={tc.budget:g}")
    metrics: dict[str, float] = {}
    if main:  # the per-token traces (token_trace) are cut back like the step log: a redone step is written once
        trim_step_log(step_log_path(out), trainer.step)
        trim_step_log(token_trace_path(out), trainer.step)
    while trainer.step < tc.steps:
        started = time.perf_counter()
        trainer.trace = trace = step_trace(tc.token_trace, trainer.step, tc.steps, main)
        metrics, micro, budget = train_step(trainer)
        trainer.trace = None
        metrics["perf/samples_per_s"] = tc.method.effective_batch_size / (time.perf_counter() - started)
        metrics["perf/peak_memory_gb"] = peak_memory_gb(trainer.accelerator.device)
        step, last = trainer.step, trainer.step == tc.steps
        if main:
            append_jsonl(step_log_path(out), [{"step": step, **metrics}])
            if trace is not None:
                append_jsonl(token_trace_path(out), trace.records(budget))
        if step % tc.log_every == 0 or last:
            tracker.log(metrics, step=step)
            if main:
                log.info("step %d/%d: %s", step, tc.steps, metric_line(metrics))
        if step % tc.sample_table_every == 0 or last:
            tracker.log_table("rollouts", TABLE_COLUMNS, sample_rows(trainer, step, budget, micro), step=step)
        saved = step % tc.save_every == 0 or last
        if saved:
            save(trainer, out, defining, resolved)
        bar.update(1)
        bar.set_postfix(loss=f"{metrics['train/loss']:.4f}", budget=f"{budget:.3f}")
        signum = stop.agreed(trainer.accelerator)
        if signum is not None and not last:
            if not saved:
                save(trainer, out, defining, resolved)
            bar.close()
            raise TrainingStoppedError(signum, step, tc.steps, out / "state")
    bar.close()
    return metrics
