"""A run's ``state/`` and ``checkpoint/`` as the loop writes and reads them, under either strategy.

``save`` writes the resume state (``trainer.pt`` + ``meta.json``; under ``distributed.strategy=fsdp`` the
tensors as shards beside them, ``training.sharded_state``), ``restore`` loads it into a fresh ``Trainer``, and
``write_checkpoint`` exports the final model: a LoRA run's PEFT adapter as ``adapter/`` and, unless
``save_merged=false``, the full model as the HF directory ``checkpoint/``, each with a model card (each skipped
when it already holds the final model).
The file formats, atomic swaps and digests are ``sparsectx.checkpoints``' and ``training.checkpoint``'s.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from accelerate.utils import gather_object

from sparsectx.checkpoints import DamagedFileError, checkpoint_info, verify_checkpoint
from sparsectx.hashing import config_hash
from sparsectx.io import git_commit
from sparsectx.paths import budget_tag
from sparsectx.redact import redact
from sparsectx.tracking import Tracker
from sparsectx.training import checkpoint as ckpt
from sparsectx.training.lora_export import ADAPTER_DIR, adapter_weights, save_lora_adapter
from sparsectx.training.model_card import ADAPTER, MERGED, base_model, render_card, training_facts
from sparsectx.training.sharded_state import ema_scalars, export_sharded, load_shards, save_shards
from sparsectx.training.sharding import is_sharded
from sparsectx.training.student import export_model, load_trainable_state, trainable_state
from sparsectx.training.update import Trainer

log = logging.getLogger(__name__)


def restore(trainer: Trainer, payload: dict[str, Any], state_dir: Path, meta: dict[str, Any]) -> None:
    """Returns None after loading weights, optimizer, scheduler, EMA, RNG and counters from a payload (and,
    under fsdp, the shards beside it in ``state_dir``)."""
    if is_sharded(trainer.student):
        load_shards(trainer, state_dir, meta, payload)
    else:
        load_trainable_state(trainer.student, payload["trainable"])
        trainer.optimizer.load_state_dict(payload["optimizer"])
        if trainer.student.ema is not None:
            trainer.student.ema.load_state_dict(payload["ema"])
    trainer.scheduler.load_state_dict(payload["scheduler"])
    rngs = payload["rng"]
    ckpt.set_rng_state(rngs[trainer.accelerator.process_index % len(rngs)])
    trainer.step, trainer.samples_seen = int(payload["step"]), int(payload["samples_seen"])
    rollouts = payload.get("rollouts")  # per process; present only between reuse steps (num_iterations > 1)
    if rollouts is not None:
        if len(rollouts) != trainer.accelerator.num_processes:
            raise ValueError(
                f"state/ holds the rollouts of {len(rollouts)} processes, reused by the next step; resume with "
                f"{len(rollouts)} processes (this run has {trainer.accelerator.num_processes})"
            )
        trainer.rollouts = rollouts[trainer.accelerator.process_index]
    trainer.wandb_id = payload["wandb_id"]


def save(trainer: Trainer, out: Path, defining: dict[str, Any], resolved: dict[str, Any]) -> None:
    """Returns None after writing ``state/`` atomically (main process; every process contributes its RNG)."""
    many = trainer.accelerator.num_processes > 1
    rngs = gather_object([ckpt.rng_state()]) if many else [ckpt.rng_state()]
    rollouts = trainer.rollouts  # the same steps keep them on every process
    if rollouts is not None:
        rollouts = gather_object([rollouts]) if many else [rollouts]
    student, tmp, sharding = trainer.student, None, {}
    if is_sharded(student):  # every process writes its shards; trainer.pt keeps the rest
        tmp, digests = save_shards(trainer, out / "state")
        sharding = {"sharding": "fsdp", "shards_sha256": digests}
    if trainer.accelerator.is_main_process:
        ema = None if student.ema is None else student.ema.state_dict()
        payload = {"step": trainer.step, "samples_seen": trainer.samples_seen}
        if tmp is None:
            payload.update(trainable=trainable_state(student), optimizer=trainer.optimizer.state_dict())
        payload.update(
            scheduler=trainer.scheduler.state_dict(),
            ema=ema if tmp is None or ema is None else ema_scalars(ema),  # under fsdp its tensors are in the shards
            rng=rngs,
            wandb_id=trainer.wandb_id,
            config_hash=config_hash(defining),
        )
        if rollouts is not None:  # the next steps reuse them; absent otherwise (num_iterations = 1: never)
            payload["rollouts"] = rollouts
        meta = {key: payload[key] for key in ("step", "samples_seen", "wandb_id", "config_hash")}
        # recorded redacted (credentials out); config_hash above is of the config as given, so it stays stable
        meta.update(
            defining=redact(defining),
            resolved=redact(resolved),
            processes=trainer.accelerator.num_processes,
            **sharding,
        )
        if rollouts is not None:  # checked before the model loads: they resume on this many processes only
            meta["rollouts_kept"] = True
        ckpt.save_state(out / "state", payload, meta, tmp)
    trainer.accelerator.wait_for_everyone()


def log_checkpoint(tracker: Tracker, trainer: Trainer, out: Path, defining: dict[str, Any]) -> None:
    """Returns None after handing the final model to the tracker (uploaded if ``logger.log_checkpoints``):
    ``checkpoint/``, or a LoRA run's ``adapter/`` under ``save_merged=false``."""
    tc = trainer.cfg
    name = f"{tc.experiment}-{tc.model.name}-{tc.method.name}-{tc.pruner.name}-b{budget_tag(tc.budget)}-s{tc.seed}"
    meta = {
        "steps": trainer.step,
        "samples_seen": trainer.samples_seen,
        "config_hash": config_hash(defining),
    }
    tracker.log_checkpoint(name, out / ("checkpoint" if tc.save_merged else ADAPTER_DIR), meta)


def checkpoint_is_current(target: Path, info: dict[str, Any]) -> bool:
    """Returns whether ``checkpoint/`` already holds this run's final model with every file intact.

    A file missing (Snakemake deletes the train rule's declared ``config.json`` before it reruns the job),
    changed or added, or a checkpoint that records no digest of some file, is not current: ``write_checkpoint``
    then rewrites the whole directory from the final resume state.
    """
    try:
        return checkpoint_info(target) == info and verify_checkpoint(target)
    except DamagedFileError as err:
        log.warning("rewriting the damaged checkpoint from the resume state: %s", err)
        return False


def agreed_current(trainer: Trainer, target: Path, info: dict[str, Any]) -> bool:
    """Returns whether ``target`` already holds this run's final files intact, as the main process finds it; under
    fsdp every process gets its answer (they gather the weights together, or none does); other processes of a
    replicated run get True (they write nothing)."""
    current = checkpoint_is_current(target, info) if trainer.accelerator.is_main_process else True
    if is_sharded(trainer.student):
        current = bool(gather_object([current])[0])
    return current


def write_checkpoint(trainer: Trainer, out: Path, defining: dict[str, Any]) -> None:
    """Returns None after writing the final model, each folder skipped if it already holds it intact: a LoRA run's
    PEFT adapter to ``adapter/`` (``training.lora_export``), then, unless ``save_merged=false``, the full model to
    ``checkpoint/`` (LoRA merged). Each gets a model card and ``sparsectx_training.json`` (``training.model_card``).

    ``checkpoint/config.json`` is the pipeline's marker of a finished run, so ``checkpoint/`` is written last.
    """
    tc, student = trainer.cfg, trainer.student
    info = {
        "config_hash": config_hash(defining),
        "steps": trainer.step,
        "samples_seen": trainer.samples_seen,
    }
    main = trainer.accelerator.is_main_process
    base = base_model(tc.model, defining["model.snapshot"])
    facts = training_facts(tc, trainer.step, trainer.samples_seen)
    record = {**info, "git": git_commit(), "base_model": base.as_record(), "training": facts}
    adapter = out / ADAPTER_DIR
    if student.peft is not None and not agreed_current(trainer, adapter, info):  # before the merge folds it in
        weights = adapter_weights(student)
        if main:
            save_lora_adapter(adapter, student, weights, base, record, render_card(ADAPTER, base, facts))
    target = out / "checkpoint"
    if tc.save_merged and not agreed_current(trainer, target, info):
        # under fsdp every process takes part in the gather
        model = export_sharded(student, tc.model, tc.method, main) if is_sharded(student) else export_model(student)
        if main:
            full = {**record, "lora_merged": student.peft is not None}
            ckpt.save_checkpoint(target, model, student.processor, full, render_card(MERGED, base, facts))
    elif not tc.save_merged and main and not target.exists():
        log.info("save_merged=false: %s holds the LoRA adapter; no merged copy in %s", adapter, target)
    trainer.accelerator.wait_for_everyone()
