"""Typed schema of ``conf/train.yaml`` (the whole composed training config), checked before any work starts.

``load_train_config`` merges the composed ``DictConfig`` into ``TrainConfig``: an unknown, missing or mistyped
key is an error naming the key, and every ``__post_init__`` checks ranges and combinations, naming the full
dotted key, the value found and the fix (style conventions 4, 5, 25). The method part lives in
``sparsectx.training.method``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from sparsectx.budget import check_budget
from sparsectx.checks import check_choice
from sparsectx.config_schema import failure, load_config
from sparsectx.dotted import flatten
from sparsectx.engine.config import EngineConfig
from sparsectx.models import ModelConfig
from sparsectx.models.loading import resolve_model_path, snapshot_identity
from sparsectx.pruning import pruners_at
from sparsectx.pruning.base import IN_LLM
from sparsectx.pruning.config import PrunerConfig
from sparsectx.run_tags import RUN_DEFINING_PREFIXES
from sparsectx.tracking import LoggerConfig
from sparsectx.train_data_check import check_training_data
from sparsectx.training.method import MethodConfig

COPY = re.compile(r"\$\{(\w+)\}")
"""A value that is one plain interpolation, ``${budget}``: a copy of that key's value."""


ROLLOUT_WEIGHTS = ("auto", "copy", "live")
RUN_DIR_PERMISSIONS = ("private", "umask")
"""``auto``: ``copy`` for a LoRA student on CUDA, else ``live``; ``copy``: a plain twin of the student's current
weights (``sparsectx.training.decode_copy``); ``live``: the student itself."""


TRAIN_ORDERS = ("shuffled", "file")
"""``shuffled``: every epoch is a seeded permutation of the rows; ``file``: the rows in the file's order, so the
step that starts at sample s takes rows s … s + ``method.effective_batch_size`` − 1 (a file written batch by
batch by a balanced sampler, ``sparsectx.data.sources.sampler``, keeps its batches)."""


@dataclass
class TrainDataConfig:
    """``train_data``: the training split and the prompt protocol shared with evaluation."""

    path: str
    """VLMEvalKit-layout TSV of training items (``sparsectx.data.read_tsv``)."""
    system: str
    """System message of every prompt."""
    instruction: str
    """Sentence appended to every question (asks for <think> then <answer>)."""
    mcq_hint: str
    """Line after the options of a multiple-choice question."""
    max_skip_fraction: float
    """Largest share of unusable rows (``Skip``) tolerated before the run refuses to start."""
    order: str
    """shuffled | file (``TRAIN_ORDERS``): the order the rows are visited in (``training.batches.TrainingSet``).
    Under ``file`` an unusable row is refused (it would shift every later batch)."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.max_skip_fraction < 1.0:
            raise ValueError(f"train_data.max_skip_fraction={self.max_skip_fraction} must lie in [0, 1)")
        check_choice(self.order, TRAIN_ORDERS, "train_data.order")


OPTIMIZER_STATES = ("fp32", "int8")
"""``fp32``: ``torch.optim.AdamW``'s fp32 moments; ``int8``: torchao's ``AdamW8bit`` (8-bit moments)."""


@dataclass
class MemoryConfig:
    """``memory``: switches that trade compute or optimizer precision for accelerator memory (off: plain)."""

    activation_checkpointing: bool
    """Recompute the student's decoder layers in backward (HF gradient checkpointing, non-reentrant): one
    layer's activations live at a time instead of every layer's, for about one more student forward per
    micro-batch. The numbers do not change."""
    teacher_offload: bool
    """Keep the separate frozen teacher copy (full parameters with ``method.teacher.kind=frozen`` only) on the
    CPU and move it to the device once per step, for the teacher logits of all the step's micro-batches, which
    then wait on the CPU. The numbers do not change."""
    optimizer_states: str
    """AdamW's moments: fp32 | int8 (torchao ``AdamW8bit``, block-wise: 2 instead of 8 bytes per trained
    parameter; a tensor under 4096 values, or not a multiple of 256, keeps fp32 moments). int8 changes the
    numbers, so it is run-defining."""

    def __post_init__(self) -> None:
        check_choice(self.optimizer_states, OPTIMIZER_STATES, "memory.optimizer_states")

    def check_method(self, method: MethodConfig) -> None:
        """Returns None; raises ValueError if ``teacher_offload`` is on without a separate frozen copy."""
        if self.teacher_offload and (method.lora.enabled or method.teacher.kind != "frozen"):
            raise ValueError(
                f"memory.teacher_offload=True with method.lora.enabled={method.lora.enabled} and "
                f"method.teacher.kind={method.teacher.kind!r}: only full-parameter training "
                "(method.lora.enabled=false) with method.teacher.kind=frozen keeps a separate teacher copy "
                "to offload; set memory.teacher_offload=false"
            )
        if self.teacher_offload and method.objective == "rl":
            raise ValueError(
                "memory.teacher_offload=True with method.objective='rl': the KL reference scores the pruned "
                "context on the device, not the offloaded full-context teacher; set "
                "memory.teacher_offload=false"
            )


STRATEGIES = ("none", "fsdp")
"""``none``: every process holds the whole model and optimizer; ``fsdp``: FSDP2 shards them
(``sparsectx.training.sharding``)."""


@dataclass
class DistributedConfig:
    """``distributed``: how several processes share the model (``fsdp`` on one process shards over one rank)."""

    strategy: str
    """none | fsdp. ``none`` replicates the model and optimizer and sums the gradients by all-reduce; ``fsdp``
    shards the language model's parameters, gradients and AdamW states over the processes (the vision tower
    stays replicated). The step's gradient is the same ∇L either way."""

    def __post_init__(self) -> None:
        check_choice(self.strategy, STRATEGIES, "distributed.strategy")

    def check_run(self, memory: MemoryConfig, engine: EngineConfig, model: ModelConfig) -> None:
        """Returns None after settling ``auto`` compilation to ``off`` under fsdp; raises ValueError for
        settings that need the whole model on every process, or that fsdp has not been run with."""
        if self.strategy != "fsdp":
            return
        compiled = (("engine.compile", engine, "compile"), ("model.compile_blocks", model, "compile_blocks"))
        for key, holder, attr in compiled:
            if getattr(holder, attr) == "on":
                raise ValueError(
                    f"{key}=on with distributed.strategy=fsdp: torch.compile of the sharded units has not been "
                    f"run or tested (the fsdp figures are eager); set {key}=off (auto is off under fsdp)"
                )
            setattr(holder, attr, "off")
        if memory.teacher_offload:
            raise ValueError(
                "memory.teacher_offload=true with distributed.strategy=fsdp: fsdp shards the frozen teacher "
                "copy over the processes instead; set memory.teacher_offload=false"
            )


@dataclass
class TrainConfig:
    """The composed ``conf/train.yaml``."""

    experiment: str
    """Experiment name: first component of the run directory."""
    grid: Any
    """The study grid of an experiment preset (``conf/experiment``); the Snakefile reads it, training does not."""
    runs_root: str
    """Root of every run directory."""
    run_tag: str
    """Appended to the method's folder (``<method>+<tag>``): ``auto`` (the typed run-defining overrides outside a
    study preset, ``sparsectx.run_tags``; resolved by ``training.loop.run`` before this config is built), a name,
    or ``""`` for none."""
    run_dir_permissions: str
    """private | umask. ``private``: the run directory is made 0700 (only you can read it or write its resume
    state) and a resume state in one that others can write is refused (``training.loop.guard_run_dir``);
    ``umask``: it keeps the mode your umask gives, e.g. to share runs with your group."""
    seed: int
    """Root seed, an int (null is an error); every random stream derives from it (``sparsectx.seeding.derive_seed``)."""
    budget: float
    """The budget the run trains at (its final budget for curricula); set by the method preset."""
    steps: int
    """Optimizer steps of the whole run."""
    micro_batch_size: int
    """Prompts per forward/backward on one process; each brings ``method.rollouts_per_prompt`` sequences
    (objective ``rl``: ``method.rl.group_size``), so a micro-batch holds that many times more sequences."""
    grad_accum: int | None
    """Micro-batches per optimizer step; null = method.effective_batch_size / (processes x micro_batch)."""
    max_new_tokens: int
    """Longest rollout; reference prefixes are cut to the same length."""
    rollout_batch_size: int | None
    """Rollouts the engine decodes at once; null = the whole per-process step (all micro-batches)."""
    rollout_weights: str
    """Which weights decode the rollouts: auto | copy | live (``sparsectx.training.decode_copy``); ``copy``
    decodes with a plain twin of the student's current weights, ``auto`` picks it for LoRA on CUDA."""
    teacher_weights: str
    """Which weights run an ``ema`` or ``shared`` teacher's forward: auto | copy | live. ``copy`` refreshes the
    rollout twin to the teacher's tensors and runs it without adapter layers (the rounding of one merge,
    as for rollouts); ``auto`` picks it for LoRA on CUDA; ``live`` runs the student's own layers."""
    prefetch_host_inputs: bool
    """Build the next step's prompts and processor tensors (image decoding, resizing) on a CPU thread while
    this step runs on the GPU (``sparsectx.training.prefetch``); the same inputs either way."""
    deterministic: bool
    """``torch.use_deterministic_algorithms`` for the run (``sparsectx.training.determinism``): the same seed
    gives the same weights on CUDA; false trades that for speed."""
    engine: EngineConfig
    """The decode engine's settings (``conf/engine``)."""
    memory: MemoryConfig
    """Accelerator-memory switches (activation checkpointing, teacher offload, 8-bit optimizer states)."""
    distributed: DistributedConfig
    """How several processes share the model: replicated (``none``) or sharded (``fsdp``)."""
    save_every: int
    """Optimizer steps between resume states (``state/``); the last step always saves."""
    save_merged: bool
    """Write ``checkpoint/``, the full model (LoRA merged into the base weights), beside a LoRA run's PEFT adapter
    in ``adapter/`` (always written); false writes ``adapter/`` alone (``training.run_files.write_checkpoint``;
    ``check_save_merged`` refuses it for full-parameter methods and study presets)."""
    log_every: int
    """Optimizer steps between metric logs."""
    sample_table_every: int
    """Optimizer steps between tables of sample rollouts."""
    token_trace: int
    """Rollouts traced token by token at the first and the last optimizer step (the untrained and the trained
    student; the main process's first N of the step), 0 = off: per response token its KL(teacher‖student),
    visual sensitivity and selection, in ``<run>/token_traces.jsonl`` (``sparsectx.training.token_trace``;
    SCOPD Fig. 2a / Fig. 6, the report kind ``token_sensitivity``). The loss does not change."""
    train_data: TrainDataConfig
    model: ModelConfig
    pruner: PrunerConfig
    method: MethodConfig
    logger: LoggerConfig
    data: Any
    """The data-suite group (``conf/data``); training reads it only through ``train_data`` interpolations."""

    def __post_init__(self) -> None:
        if self.seed is None or isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"seed={self.seed!r} must be an int; pass e.g. seed=0")
        check_budget(self.budget, "budget")
        for key in (
            "steps",
            "micro_batch_size",
            "max_new_tokens",
            "save_every",
            "log_every",
            "sample_table_every",
        ):
            if getattr(self, key) < 1:
                raise ValueError(f"{key}={getattr(self, key)} must be >= 1")
        if self.rollout_batch_size is not None:
            if self.rollout_batch_size < 1:
                raise ValueError(f"rollout_batch_size={self.rollout_batch_size} must be >= 1, or null for the step")
            self.engine.check_slots(self.rollout_batch_size, "rollout_batch_size")
        check_choice(self.rollout_weights, ROLLOUT_WEIGHTS, "rollout_weights")
        check_choice(self.run_dir_permissions, RUN_DIR_PERMISSIONS, "run_dir_permissions")
        check_choice(self.teacher_weights, ROLLOUT_WEIGHTS, "teacher_weights")
        if isinstance(self.token_trace, bool) or self.token_trace < 0:
            raise ValueError(
                f"token_trace={self.token_trace!r} must be an int >= 0: rollouts traced at the first and last "
                "step (0 = off)"
            )
        if self.grad_accum is not None and self.grad_accum < 1:
            raise ValueError(f"grad_accum={self.grad_accum} must be >= 1, or null to derive it")
        self.memory.check_method(self.method)
        if self.method.layer_schedule is not None and self.pruner.stage != IN_LLM:
            in_llm = " or ".join(f"pruner={name}" for name in pruners_at(IN_LLM))
            raise ValueError(
                f"method.layer_schedule={self.method.layer_schedule!r} moves an in-LLM pruning layer (EPIC's "
                f"layer consistency distillation), but pruner {self.pruner.name!r} prunes before the LLM "
                f"(pruner.stage={self.pruner.stage!r}): choose an in-LLM pruner ({in_llm}), "
                "or train token consistency distillation alone (method=epic)"
            )
        self.distributed.check_run(self.memory, self.engine, self.model)
        self.check_save_merged()
        if self.method.positions.needs_probe:
            top = self.method.schedule.max_budget() + float(self.method.positions.delta or 0.0)
            if top > 1.0 + 1e-12:
                raise ValueError(
                    f"method.positions.delta={self.method.positions.delta} on top of the largest budget "
                    f"{self.method.schedule.max_budget()} exceeds 1: the b+δ probe must stay a budget; "
                    "lower delta"
                )

    def check_save_merged(self) -> None:
        """Returns None; raises ValueError for ``save_merged=false`` where the merged copy is the only model (a
        full-parameter run has no adapter) or is what the pipeline evaluates (a study preset: the train rule's
        output is ``checkpoint/config.json``)."""
        if self.save_merged:
            return
        if not self.method.lora.enabled:
            raise ValueError(
                f"save_merged=false keeps only a LoRA run's adapter, but method={self.method.name} trains full "
                "parameters (method.lora.enabled=false): its checkpoint/ is the trained model itself; set "
                "save_merged=true"
            )
        if self.grid is not None:
            raise ValueError(
                f"save_merged=false with experiment={self.experiment}, a study preset: the pipeline evaluates every "
                "run from its checkpoint/ (the train rule's output checkpoint/config.json), which save_merged=false "
                "does not write; set save_merged=true (the LoRA adapter is saved in adapter/ either way), or train "
                "under a study name of your own (experiment=<name> with no preset file)"
            )

    def accumulation(self, processes: int) -> int:
        """Returns micro-batches per optimizer step; raises unless processes x micro x accum == effective."""
        per_round = processes * self.micro_batch_size
        effective = self.method.effective_batch_size
        if processes > effective:
            raise ValueError(
                f"{processes} processes for method.effective_batch_size={effective} samples per step: every "
                f"process needs at least one sample; launch at most {effective} processes or raise "
                "method.effective_batch_size"
            )
        accum = self.grad_accum if self.grad_accum is not None else effective // per_round
        if accum < 1 or per_round * accum != effective:
            fits = [m for m in range(1, effective // processes + 1) if effective % (processes * m) == 0]
            hint = (
                f"with {processes} processes micro_batch_size can be one of {fits}"
                if fits
                else f"{effective} samples do not divide over {processes} processes: launch a number of "
                f"processes that divides {effective}"
            )
            raise ValueError(
                f"method.effective_batch_size={effective} != processes ({processes}) x micro_batch_size "
                f"({self.micro_batch_size}) x grad_accum ({self.grad_accum}); choose micro_batch_size and "
                f"grad_accum (or grad_accum=null) so that the product matches ({hint})"
            )
        return accum


def load_train_config(cfg: DictConfig) -> TrainConfig:
    """Returns the composed config as a checked ``TrainConfig``; every unknown, missing, mistyped or refused key
    raises, all at once (``sparsectx.config_schema.load_config``).

    ``budget`` is checked first, under its own name: the method preset copies it into its schedule
    (``budget: ${budget}``), whose checks run before ``TrainConfig``'s and would name the copy (that repeat is not
    reported). Any other error in such a copy of a top-level key ends by naming the key to set instead.
    """
    copies = top_level_copies(cfg)

    def explain(message: str) -> str | None:
        """Returns ``message`` naming the top-level key of each copy it reports; None for a copy of a refused
        ``budget``, which its own check reports."""
        sources = {copies[key] for key in copies_named(message, copies)}
        if "budget" in sources and failure(lambda: check_budget(cfg.budget, "budget")) is not None:
            return None
        return name_copied_keys(message, copies, cfg)

    return load_config(
        TrainConfig,
        cfg,
        "the training config (conf/train.yaml)",
        checks=[lambda: check_budget(cfg.budget, "budget"), lambda: check_training_data(cfg)],
        explain=explain,
    )


def top_level_copies(cfg: DictConfig) -> dict[str, str]:
    """Returns {dotted nested key: top-level key} for every nested value written as ``${<top-level key>}``."""
    raw = OmegaConf.to_container(cfg, resolve=False)
    copies = {}
    for key, value in flatten(raw).items():
        match = COPY.fullmatch(value) if isinstance(value, str) else None
        if match and "." in key and match[1] in raw:
            copies[key] = match[1]
    return copies


def name_copied_keys(message: str, copies: dict[str, str], cfg: DictConfig) -> str:
    """Returns ``message`` plus, for each copied key it reports (as ``<block>: <name>=``), the key to set."""
    notes = [
        f"{key} is a copy of {copies[key]}={cfg[copies[key]]!r}: set {copies[key]}=<value> instead"
        for key in copies_named(message, copies)
    ]
    return "; ".join([message, *notes])


def copies_named(message: str, copies: dict[str, str]) -> list[str]:
    """Returns the copied keys (``top_level_copies``) an error message reports, as ``<block>: <name>=``."""
    return [key for key in copies if f"{key.rpartition('.')[0]}: {key.rpartition('.')[2]}=" in message]


def run_defining(resolved: dict[str, Any]) -> dict[str, Any]:
    """Returns the flattened run-defining keys (``RUN_DEFINING_PREFIXES``) of a resolved config, plus
    ``model.snapshot``: the identity of the checkpoint ``model.path`` names at ``model.revision``
    (``loading.snapshot_identity``: a hub snapshot's commit, else a fingerprint of the folder), so the same
    hub id updated upstream, or a folder whose weights changed, is another run rather than a resumable one.

    Raises:
        FileNotFoundError: the checkpoint is not at hand (a hub id: naming the download command).
    """
    defining = {
        key: value
        for key, value in flatten(resolved).items()
        if any(key == p or key.startswith(p if p.endswith(".") else p + ".") for p in RUN_DEFINING_PREFIXES)
    }
    model = resolved.get("model")
    if model is not None:  # a partial config (no model group) defines no snapshot
        folder = resolve_model_path(model["path"], model["revision"], model["local_files_only"])
        defining["model.snapshot"] = snapshot_identity(folder)
    return defining
