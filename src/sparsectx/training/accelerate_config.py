"""A user's accelerate config checked against the trainer's own keys before any work (issue 42, item 3).

Where accelerate's settings come from: ``accelerate launch`` reads ``--config_file``, else the file
``accelerate config`` wrote (``$HF_HOME/accelerate/default_config.yaml``, by default under
``~/.cache/huggingface``), merges its command-line flags and exports the result as environment variables for
the script (``accelerate/commands/launch.py``, ``_validate_launch_command`` and ``launch_command``;
``accelerate/utils/launch.py``, ``prepare_simple_launcher_cmd_env``, ``prepare_multi_gpu_env``,
``prepare_deepspeed_cmd_env``). ``Accelerator()`` never reads the file itself: it reads those variables, from
whichever launcher (or the user's shell) set them (``accelerate/accelerator.py``, ``Accelerator.__init__``;
``accelerate/state.py``, ``PartialState.__init__`` and ``AcceleratorState.__init__``). So the variables are
what this module checks, whatever launched the run.

The trainer never calls ``accelerator.prepare``: it takes the process group, the device and the reductions
from Accelerate, and governs precision, sharding, accumulation and compilation by its own keys. A setting
accelerate would apply through ``prepare`` (or apply wrongly without it) is therefore either the same as the
project's key, and accepted, or refused by ``check_accelerate_environment`` with both names:

=============================================  ====================================  ===========================
accelerate (config key / flag: variable)       project key                            decision
=============================================  ====================================  ===========================
mixed_precision: ACCELERATE_MIXED_PRECISION    model.dtype                            ``no``; ``bf16`` with
                                                                                      bfloat16; else refused
use_cpu / --cpu: ACCELERATE_USE_CPU            model.device                           with ``cpu``; else refused
distributed_type FSDP / --use_fsdp:            distributed.strategy                   refused
ACCELERATE_USE_FSDP (+ FSDP_*)
distributed_type DEEPSPEED / --use_deepspeed:  distributed.strategy, memory.*        refused
ACCELERATE_USE_DEEPSPEED
distributed_type MEGATRON_LM:                  distributed.strategy                   refused
ACCELERATE_USE_MEGATRON_LM
parallelism_config:                            distributed.strategy                   refused
ACCELERATE_USE_PARALLELISM_CONFIG
deepspeed_config.gradient_accumulation_steps:  grad_accum, micro_batch_size           ``1``; else refused
ACCELERATE_GRADIENT_ACCUMULATION_STEPS
dynamo_config.dynamo_backend:                  model.compile_blocks, engine.compile  ``no``; else refused
ACCELERATE_DYNAMO_BACKEND
=============================================  ====================================  ===========================

Why each is refused rather than passed on (accelerate 1.16's code): fp16 makes ``Accelerator.backward`` scale
the loss by a ``GradScaler`` that nothing unscales before the trainer's clip and AdamW step (the scaler is made
in ``Accelerator.__init__`` for a non-CPU device); bf16 asks for fp32 weights with bf16 autocast, which is what
``model.dtype=bfloat16`` does (trained tensors fp32, forwards autocast: ``sparsectx.training.student``), so it
agrees with that dtype alone; ``ACCELERATE_USE_CPU`` forces the CPU whatever ``cpu=`` says
(``AcceleratorState.__init__``), so a CUDA ``model.device`` would train on the CPU; FSDP, DeepSpeed,
Megatron-LM and a parallelism config wrap only what ``prepare`` is given (DeepSpeed's and Megatron-LM's
``Accelerator.backward`` would hand the loss to an engine that only ``prepare`` creates, or return without
any backward), while the trainer shards by ``distributed.strategy`` (its own FSDP2 units,
``sparsectx.training.sharding``); ``gradient_accumulation_steps`` divides every loss in
``Accelerator.backward`` and the variable wins over the ``Accelerator`` argument, while the trainer's
micro-batches are its own (``grad_accum``) and its loss is already the step's exact sum; a dynamo backend
compiles only prepared models (and turns TF32 matmuls on, ``AcceleratorState.__init__``), while the trainer
compiles by ``model.compile_blocks``. The Accelerator is then built with mixed precision off
(``accelerator_arguments``), so ``model.dtype`` is the one source of the compute dtype.

``accelerate launch --num_processes N`` without a config file, and ``torchrun``, export none of these
settings (or their defaults: ``no``, ``NO``, ``False``) and run as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from accelerate.utils import str_to_bool

from sparsectx.cli import ConfigError
from sparsectx.training.config import TrainConfig

ON_CPU = "cpu"
"""The ``model.device`` that agrees with accelerate's ``use_cpu``."""
FSDP_PREFIX = "FSDP_"
"""accelerate's fsdp_config as exported by ``prepare_multi_gpu_env`` (``FSDP_SHARDING_STRATEGY``, ...)."""
RESTART = (
    "accelerate launch exports these variables from its --config_file (else "
    "~/.cache/huggingface/accelerate/default_config.yaml) and its flags: change them there, or unset them "
    "(docs/distributed.md)"
)
"""The closing advice of every refusal: where the variables came from."""


def flag(environ: Mapping[str, str], name: str) -> bool:
    """Returns whether accelerate reads the variable ``name`` as on (``accelerate/utils/environment.py``,
    ``str_to_bool``: y, yes, t, true, on, 1 in any case); unset is off."""
    return bool(str_to_bool(environ.get(name, "false")))


def mixed_precision(tc: TrainConfig, environ: Mapping[str, str]) -> str | None:
    """Returns the refusal of accelerate's mixed precision unless it is ``no``, or ``bf16`` on a bfloat16
    ``model.dtype`` (the same fp32 weights with bf16 autocast), else None."""
    value = environ.get("ACCELERATE_MIXED_PRECISION", "no").lower()
    if value == "no" or (value == "bf16" and tc.model.dtype == "bfloat16"):
        return None
    why = {
        "fp16": "adds a GradScaler to Accelerator.backward that nothing unscales before the trainer's clip "
        "and AdamW step; the trainer has no loss scaling",
        "bf16": f"asks for bf16 autocast, which the trainer takes from model.dtype={tc.model.dtype}",
    }.get(value, "is not a precision the trainer has")
    return (
        f"ACCELERATE_MIXED_PRECISION={value} (accelerate config mixed_precision / --mixed_precision) {why}: set "
        "mixed_precision: no in the accelerate config and choose the compute dtype by model.dtype (bfloat16: "
        "trained tensors fp32, forwards autocast to bf16; accelerate's bf16 is accepted with it)"
    )


def use_cpu(tc: TrainConfig, environ: Mapping[str, str]) -> str | None:
    """Returns the refusal of accelerate's CPU switch under a non-CPU ``model.device``, else None."""
    if not flag(environ, "ACCELERATE_USE_CPU") or tc.model.device == ON_CPU:
        return None
    return (
        f"ACCELERATE_USE_CPU={environ['ACCELERATE_USE_CPU']} (accelerate config use_cpu / --cpu) puts every "
        f"process on the CPU whatever the trainer asks, but model.device={tc.model.device}: set "
        f"model.device={ON_CPU} for a CPU run, or use_cpu: false in the accelerate config"
    )


def fsdp(tc: TrainConfig, environ: Mapping[str, str]) -> str | None:
    """Returns the refusal of accelerate's FSDP plugin (with the fsdp_config variables it exported), else None."""
    if not flag(environ, "ACCELERATE_USE_FSDP"):
        return None
    settings = ", ".join(f"{key}={value}" for key, value in sorted(environ.items()) if key.startswith(FSDP_PREFIX))
    return (
        f"ACCELERATE_USE_FSDP={environ['ACCELERATE_USE_FSDP']} (accelerate config distributed_type: FSDP / "
        f"--use_fsdp; {settings or 'no fsdp_config'}) wraps only models passed to accelerator.prepare, which the "
        f"trainer never calls, so none of it would apply: set distributed_type: MULTI_GPU in the accelerate "
        f"config and shard by distributed.strategy=fsdp (now {tc.distributed.strategy}; FSDP2 over every decoder "
        "layer, sparsectx.training.sharding)"
    )


def deepspeed(tc: TrainConfig, environ: Mapping[str, str]) -> str | None:
    """Returns the refusal of accelerate's DeepSpeed plugin, else None."""
    if not flag(environ, "ACCELERATE_USE_DEEPSPEED"):
        return None
    stage = environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE", "from its config file")
    return (
        f"ACCELERATE_USE_DEEPSPEED={environ['ACCELERATE_USE_DEEPSPEED']} (accelerate config distributed_type: "
        f"DEEPSPEED, zero_stage {stage}) makes Accelerator.backward hand the loss to a DeepSpeed engine that "
        "only accelerator.prepare creates, which the trainer never calls: set distributed_type: MULTI_GPU in the "
        f"accelerate config; shard parameters, gradients and optimizer states by distributed.strategy=fsdp (now "
        f"{tc.distributed.strategy}; ZeRO-3's sharding) and save memory by memory.optimizer_states=int8 and "
        "memory.activation_checkpointing"
    )


def megatron(tc: TrainConfig, environ: Mapping[str, str]) -> str | None:
    """Returns the refusal of accelerate's Megatron-LM plugin, else None."""
    if not flag(environ, "ACCELERATE_USE_MEGATRON_LM"):
        return None
    return (
        f"ACCELERATE_USE_MEGATRON_LM={environ['ACCELERATE_USE_MEGATRON_LM']} (accelerate config "
        "distributed_type: MEGATRON_LM) makes Accelerator.backward return without a backward and parallelises only "
        "prepared models: set distributed_type: MULTI_GPU in the accelerate config and choose the sharding by "
        f"distributed.strategy (now {tc.distributed.strategy})"
    )


def parallelism(tc: TrainConfig, environ: Mapping[str, str]) -> str | None:
    """Returns the refusal of accelerate's parallelism config (TP, CP, HSDP meshes), else None."""
    if not flag(environ, "ACCELERATE_USE_PARALLELISM_CONFIG"):
        return None
    return (
        f"ACCELERATE_USE_PARALLELISM_CONFIG={environ['ACCELERATE_USE_PARALLELISM_CONFIG']} (accelerate config "
        "parallelism_config / --use_parallelism_config) builds a device mesh that only prepared models use: remove "
        f"parallelism_config from the accelerate config and choose the sharding by distributed.strategy (now "
        f"{tc.distributed.strategy})"
    )


def accumulation(tc: TrainConfig, environ: Mapping[str, str]) -> str | None:
    """Returns the refusal of accelerate's gradient accumulation other than 1, else None."""
    value = environ.get("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "1")
    if value.strip() == "1":
        return None
    return (
        f"ACCELERATE_GRADIENT_ACCUMULATION_STEPS={value} (accelerate config "
        "deepspeed_config.gradient_accumulation_steps / --gradient_accumulation_steps) divides every loss in "
        "Accelerator.backward, while the trainer's loss is already the step's exact sum over its own "
        "micro-batches: unset it (or set 1) and set grad_accum (now "
        f"{'null' if tc.grad_accum is None else tc.grad_accum}) or micro_batch_size (now {tc.micro_batch_size}); "
        "method.effective_batch_size = "
        "processes x micro_batch_size x grad_accum"
    )


def dynamo(tc: TrainConfig, environ: Mapping[str, str]) -> str | None:
    """Returns the refusal of a TorchDynamo backend in accelerate's config, else None."""
    value = environ.get("ACCELERATE_DYNAMO_BACKEND", "no")
    if value.lower() == "no":
        return None
    return (
        f"ACCELERATE_DYNAMO_BACKEND={value} (accelerate config dynamo_config.dynamo_backend / --dynamo_backend) "
        "compiles only prepared models (and turns TF32 matmuls on): set dynamo_backend: no in the accelerate config "
        f"and compile by model.compile_blocks=on (now {tc.model.compile_blocks}; engine.compile for the rollouts' "
        f"decode step, now {tc.engine.compile})"
    )


CHECKS: tuple[Callable[[TrainConfig, Mapping[str, str]], str | None], ...] = (
    mixed_precision,
    use_cpu,
    fsdp,
    deepspeed,
    megatron,
    parallelism,
    accumulation,
    dynamo,
)
"""One check per setting accelerate and the trainer both govern (the table above)."""


def check_accelerate_environment(tc: TrainConfig, environ: Mapping[str, str]) -> None:
    """Returns None when accelerate's exported settings ``environ`` agree with ``tc``; raises ``ConfigError``
    naming, for every one that does not, accelerate's variable (and the config key or flag that sets it) and the
    project's key to use instead.

    Call it before anything is loaded or written: an accepted setting changes nothing (the trainer's own key
    decides), a refused one would be ignored or misapplied for the whole run.
    """
    problems = [problem for check in CHECKS if (problem := check(tc, environ)) is not None]
    if problems:
        raise ConfigError(f"accelerate's config conflicts with the trainer's: {'; '.join(problems)}. {RESTART}")


def accelerator_arguments(tc: TrainConfig) -> dict[str, Any]:
    """Returns the ``Accelerator`` arguments of a run: the CPU when ``model.device`` is, and mixed precision
    off (an argument wins over ``ACCELERATE_MIXED_PRECISION``, ``accelerate/state.py``,
    ``AcceleratorState.__init__``), so the compute dtype comes from ``model.dtype`` alone."""
    return {"cpu": tc.model.device == ON_CPU, "mixed_precision": "no"}
