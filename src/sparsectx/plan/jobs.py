"""Every job of a study's DAG with its GPUs, per-GPU peak memory, planned time and, if any, why it is refused.

The jobs are the Snakefile's (workflow/rules/*.smk): ``preflight`` (local), ``train`` per training run and extra
seed, ``evaluate_base`` / ``evaluate_trained`` per table cell (per leaf under ``grid.eval_jobs: leaf``, in rules
numbered by the benchmarks they write: ``sparsectx.workflow.eval_jobs``), ``passk``,
``efficiency``, ``make_tables`` (local); each named by its declared outputs (``Grid.checkpoint_marker``,
``Grid.leaf``, ...). A job is attributed to the first block of ``grid.blocks`` that needs it (a training run to the
first block with a cell it trains), so a run several tables share is counted once.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass, field

from omegaconf import DictConfig

from sparsectx.eval.config import EvalConfig, load_eval_config
from sparsectx.eval.passk_cohort import source_cap
from sparsectx.eval.slots_budget import planned_slots
from sparsectx.models.published import model_hub_id
from sparsectx.paths import BASE, budget_tag
from sparsectx.plan.architecture import Architecture, architecture
from sparsectx.plan.compose import efficiency_config, eval_config, train_config
from sparsectx.plan.memory import EngineSizes, Estimate, evaluation_estimate, resume_state_gb, training_estimate
from sparsectx.plan.shapes import TrainShape, eval_shape, train_shape
from sparsectx.plan.timing import decode_tokens_per_s, efficiency_minutes, eval_minutes, train_minutes
from sparsectx.training.config import load_train_config
from sparsectx.workflow import Cell, Grid, eval_rule_name


@dataclass
class Job:
    """One job of the DAG as the plan sees it."""

    rule: str
    outputs: tuple[str, ...]
    model: str
    method: str
    point: str
    """Pruner and budget (training: the training pruner and budget; efficiency: its budgets), or empty."""
    bench: str
    gpus: int
    processes: int
    minutes: float
    requested: int
    """Minutes ``grid.resources.<stage>.runtime`` asks SLURM for today."""
    block: str
    estimate: Estimate | None = None
    notes: list[str] = field(default_factory=list)
    refusal: str | None = None
    stop_lead_s: int | None = None
    """Training: how long before its time limit SLURM warns the job (``stop_signal_lead_s``); None otherwise."""

    @property
    def gpu_hours(self) -> float:
        """Returns planned GPU-hours (GPUs x planned minutes)."""
        return self.gpus * self.minutes / 60

    @property
    def requested_gpu_hours(self) -> float:
        """Returns the GPU-hours today's SLURM time limit reserves."""
        return self.gpus * self.requested / 60


def plan_jobs(grid: Grid, plan: DictConfig) -> list[Job]:
    """Returns every job of ``grid`` with its estimates, in DAG order; refusals are set, never raised."""
    engine_cfg = eval_config(grid, grid.names("model")[0], "greedy").engine
    engine = EngineSizes(tuple(engine_cfg.slot_buckets), engine_cfg.length_step)
    archs = {
        m: architecture(model_hub_id(m)) for m in {*grid.names("model"), *plan.train_figures, plan.decode_reference}
    }
    context = _Context(grid, plan, engine, archs, _first_blocks(grid))
    jobs = [*_local("preflight", grid, plan)] if grid.preflight else []
    jobs += list(_train_jobs(context))
    jobs += list(_eval_jobs(context))
    jobs += list(_passk_jobs(context))
    jobs += list(_efficiency_jobs(context))
    return jobs + list(_local("make_tables", grid, plan))


@dataclass
class _Context:
    grid: Grid
    plan: DictConfig
    engine: EngineSizes
    archs: dict[str, Architecture]
    blocks: dict[tuple[str, Cell], str]
    eval_configs: dict[tuple[str, ...], EvalConfig] = field(default_factory=dict)
    """(model, mode, Pass@K benchmark) -> the checked evaluation config composed for it."""
    eval_sizes: dict[tuple[str, ...], tuple[int, int] | str] = field(default_factory=dict)
    """(model, mode, Pass@K benchmark, benchmark) -> the resolved (batch_size, queue_size), or why they are refused."""

    def check_memory(self, job: Job, estimate: Estimate, fixes: list[str]) -> None:
        job.estimate = estimate
        limit = self.plan.gpu_mem_gb - self.plan.unallocatable_gb
        if estimate.peak_gb > limit and job.refusal is None:
            job.refusal = (
                f"{job.rule} {job.outputs[0]}: estimated {estimate.peak_gb:.1f} GB per GPU exceeds "
                f"{limit:.0f} GB usable of gpu_mem_gb={self.plan.gpu_mem_gb:g} (largest: {_largest(estimate)}); "
                + ("; ".join(fixes) if fixes else "no switch brings it under; use a GPU with more memory")
            )


def _first_blocks(grid: Grid) -> dict[tuple[str, Cell], str]:
    """Returns (block kind, cell) -> the first block of that kind (grid order) that holds the cell."""
    first: dict[tuple[str, Cell], str] = {}
    for block in grid.blocks:
        for cell in grid.block_cells(block):
            first.setdefault((block.kind, cell), block.name)
    return first


def _largest(estimate: Estimate) -> str:
    terms = sorted(estimate.breakdown().items(), key=lambda kv: -kv[1])[:3]
    return ", ".join(f"{k} {v:.1f}" for k, v in terms)


def _local(rule: str, grid: Grid, plan: DictConfig) -> Iterator[Job]:
    minutes = plan.preflight_minutes if rule == "preflight" else plan.tables_minutes
    output = grid.preflight_output() if rule == "preflight" else grid.tables_dir()
    yield Job(rule, (output,), "", "", "", "", 0, 0, minutes, 0, "study")


def _train_jobs(ctx: _Context) -> Iterator[Job]:
    grid, plan = ctx.grid, ctx.plan
    owner = {}
    for block in grid.blocks:  # a run belongs to the first block with a trained cell of it
        for cell in grid.block_cells(block):
            if cell.method != BASE and grid.reason(cell) is None:
                owner.setdefault(grid.train_run(cell), block.name)
    gpus = grid.resources["train"]["gpu"]
    runs = [(run, None) for run in grid.train_runs] + [(r, s) for s in grid.extra_seeds for r in grid.seeded_runs]
    for run, seed in runs:
        job = Job(
            "train" if seed is None else "train_seed",
            (grid.checkpoint_marker(run, seed),),
            run.model,
            run.method,
            f"{run.pruner} {budget_tag(run.budget)}",
            "",
            gpus,
            max(1, gpus),
            0.0,
            grid.resources["train"]["runtime"],
            owner[run],
        )
        tc = load_train_config(train_config(grid, run, seed))
        try:
            shape = train_shape(tc, job.processes, plan.visual_tokens, plan.text_tokens)
        except ValueError as err:
            job.refusal = f"train {job.outputs[0]}: cannot launch on {job.processes} processes: {err}"
            yield job
            continue
        arch = ctx.archs[run.model]
        timing = train_minutes(plan, run.model, arch, shape, ctx.archs)
        job.minutes = timing.minutes
        job.notes += [timing.note] if timing.note else []
        estimate = training_estimate(arch, shape, ctx.engine, plan.allocator_overhead_gb)
        ctx.check_memory(job, estimate, _train_fixes(ctx, arch, shape, estimate))
        step_s = (job.minutes - plan.startup_minutes.train) * 60 / max(1, shape.steps)
        job.stop_lead_s = stop_signal_lead_s(plan, step_s, resume_state_gb(estimate) * job.processes)
        yield job


def stop_signal_lead_s(plan: DictConfig, step_s: float, node_state_gb: float) -> int:
    """Returns how long before the time limit a training job asks SLURM for SIGTERM (``--signal=TERM@<lead>``):
    enough to finish the step under way and write the node's resume state (conf/plan.yaml ``stop_signal``)."""
    cfg = plan.stop_signal
    lead = cfg.factor * (step_s + node_state_gb / cfg.write_gb_per_s) + cfg.margin_s
    return min(math.ceil(lead), cfg.max_s)


SWITCHES = (
    ("memory.activation_checkpointing=true", lambda s: not s.checkpointing, {"checkpointing": True}),
    ("distributed.strategy=fsdp", lambda s: not s.fsdp and s.processes > 1, {"fsdp": True, "teacher_offload": False}),
    (
        "memory.teacher_offload=true",
        lambda s: not s.fsdp and s.lora_rank is None and s.teacher == "frozen" and not s.teacher_offload,
        {"teacher_offload": True},
    ),
    ("memory.optimizer_states=int8", lambda s: not s.int8_states, {"int8_states": True}),
    ("rollout_weights=live teacher_weights=live", lambda s: s.twin, {"twin": False}),
)
"""The settings that lower a training job's memory: (override, applies to the shape, what it changes)."""


def _train_fixes(ctx: _Context, arch: Architecture, shape: TrainShape, estimate: Estimate) -> list[str]:
    """Returns the switches that lower the estimate, applied one after another (each with the estimate it
    reaches) until the job fits, then ``micro_batch_size=1`` if the micro-batch holds several prompts."""
    limit = ctx.plan.gpu_mem_gb - ctx.plan.unallocatable_gb
    steps, current = [], shape
    for override, applies, change in SWITCHES:
        if applies(current):
            current = dataclasses.replace(current, **change)
            peak = training_estimate(arch, current, ctx.engine, estimate.overhead).peak_gb
            steps.append(f"{override} ({peak:.1f} GB)")
            if peak <= limit:
                return [f"set {' then '.join(steps)}"]
    if current.images > 1:
        current = dataclasses.replace(current, images=1, micro_sequences=current.micro_sequences // current.images)
        peak = training_estimate(arch, current, ctx.engine, estimate.overhead).peak_gb
        steps.append(f"micro_batch_size=1 ({peak:.1f} GB)")
        if peak <= limit:
            return [f"set {' then '.join(steps)}"]
    return (
        [
            f"even {' then '.join(steps)} does not fit: more GPUs per job (distributed.strategy=fsdp shards over "
            "them) or a GPU with more memory"
        ]
        if steps
        else []
    )


def _eval_jobs(ctx: _Context) -> Iterator[Job]:
    grid = ctx.grid
    resources = grid.resources["evaluate"]
    leaves: dict[tuple, list[Cell]] = {}
    seeds = [None, *grid.extra_seeds]
    for cell in grid.cells("table"):
        key = (cell.model, cell.method, cell.pruner, cell.budget, "" if grid.eval_jobs == "leaf" else cell.bench)
        leaves.setdefault(key, []).append(cell)
    for (model, method, pruner, budget, bench), cells in leaves.items():
        for seed in seeds if method != BASE else [None]:
            if seed is not None and cells[0] not in grid.seeded_cells:
                continue
            rule = eval_rule_name(grid, cells[0], seed)
            benches = grid.job_benches(dataclasses.replace(cells[0], bench=bench))  # what the job writes
            outputs = tuple(grid.leaf(dataclasses.replace(cells[0], bench=b), seed=seed) for b in benches)
            job = Job(
                rule,
                outputs,
                model,
                method,
                f"{pruner} {budget_tag(budget)}",
                bench or "all",
                resources["gpu"],
                max(1, resources["gpu"]),
                0.0,
                resources["runtime"],
                ctx.blocks["table", cells[0]],
            )
            _estimate_eval(ctx, job, "evaluate", benches, draws=1)
            yield job


def _estimate_eval(ctx: _Context, job: Job, stage: str, benches: list[str], draws: int) -> None:
    """Sets ``job``'s minutes and memory from its benchmarks' composed blocks (the widest one's memory)."""
    plan, arch = ctx.plan, ctx.archs[job.model]
    mode = "passk" if stage == "passk" else "greedy"
    cfg = eval_config(ctx.grid, job.model, mode, benches[0])
    composition = (job.model, mode, benches[0] if mode == "passk" else "")  # eval_config composes once per these
    reference = ctx.archs[plan.decode_reference]
    minutes, worst = 0.0, None
    for bench in benches:
        block = cfg.bench[bench]
        sizes = _eval_sizes(ctx, job, cfg, composition, bench)
        shape = eval_shape(cfg, block, job.processes, plan.visual_tokens, plan.text_tokens, sizes)
        items = _items(plan, cfg, bench) if stage == "passk" else bench_items(plan, bench)
        rate = decode_tokens_per_s(plan, job.model, arch, reference, shape.slots)
        minutes += eval_minutes(plan, stage, items, shape, draws, rate, arch.vision / reference.vision)
        estimate = evaluation_estimate(arch, shape, ctx.engine, plan.allocator_overhead_gb)
        worst = estimate if worst is None or estimate.peak_gb > worst.peak_gb else worst
    startup = plan.startup_minutes[stage]
    job.minutes = minutes - (len(benches) - 1) * startup  # one process: one start-up
    if job.model not in plan.efficiency_figures:
        job.notes.append(f"decode speed scaled from {plan.decode_reference} by parameter count")
    ctx.check_memory(job, worst, ["lower batch_size (the engine's slots)"])


def _eval_sizes(ctx: _Context, job: Job, cfg: DictConfig, composition: tuple[str, ...], bench: str) -> tuple[int, int]:
    """Returns the (batch_size, queue_size) an evaluation job runs ``bench`` with: ``auto`` resolved by evaluation's
    own rule at the plan's usable GPU memory (``slots_budget.planned_slots``), once per composition (model, mode,
    Pass@K benchmark) and benchmark. A size the rule refuses refuses the job (planned on at one slot)."""
    key = (*composition, bench)
    if key not in ctx.eval_sizes:
        try:
            if composition not in ctx.eval_configs:
                ctx.eval_configs[composition] = load_eval_config(cfg)
            usable = ctx.plan.gpu_mem_gb - ctx.plan.unallocatable_gb
            choice = planned_slots(ctx.eval_configs[composition], ctx.archs[job.model], usable, bench)
            ctx.eval_sizes[key] = (choice.batch_size, choice.queue_size)
        except ValueError as err:
            ctx.eval_sizes[key] = str(err)
    sizes = ctx.eval_sizes[key]
    if isinstance(sizes, str):
        job.refusal = job.refusal or f"{job.rule} {job.outputs[0]}: {sizes}"
        return 1, 1
    return sizes


def bench_items(plan: DictConfig, bench: str) -> int:
    """Returns the items conf/plan.yaml records for ``bench``; raises naming the key to add when it has none."""
    if bench not in plan.bench_items:
        raise ValueError(f"conf/plan.yaml bench_items has no {bench!r}: add its item count (rows scored) to plan it")
    return int(plan.bench_items[bench])


def _items(plan: DictConfig, cfg: DictConfig, bench: str) -> int:
    """Returns the Pass@K cohort size bound of ``bench``: its source cap and ``passk.max_items``, at most its items."""
    passk = cfg.passk
    caps = passk.source_caps if passk.cohort == "paper_numeric" else {}
    cap = source_cap(caps, bench, passk.max_items)
    return min(bench_items(plan, bench), cap if cap is not None else bench_items(plan, bench))


def _passk_jobs(ctx: _Context) -> Iterator[Job]:
    grid = ctx.grid
    resources = grid.resources["passk"]
    for cell in grid.cells("passk"):
        job = Job(
            "passk",
            (grid.leaf(cell, "passk"),),
            cell.model,
            cell.method,
            f"{cell.pruner} {budget_tag(cell.budget)}",
            cell.bench,
            resources["gpu"],
            1,
            0.0,
            resources["runtime"],
            ctx.blocks["passk", cell],
        )
        draws = eval_config(grid, cell.model, "passk", cell.bench).passk.n
        _estimate_eval(ctx, job, "passk", [cell.bench], draws=draws)
        yield job


def _efficiency_jobs(ctx: _Context) -> Iterator[Job]:
    grid, plan = ctx.grid, ctx.plan
    resources = grid.resources["efficiency"]
    for run in grid.efficiency_runs:
        job = Job(
            "efficiency",
            (grid.leaf(run.cell, "efficiency"),),
            run.model,
            run.method,
            f"{run.pruner} {'/'.join(budget_tag(b) for b in run.budgets)}",
            run.bench,
            resources["gpu"],
            1,
            0.0,
            resources["runtime"],
            ctx.blocks["efficiency", run.cell],
        )
        cfg = efficiency_config(grid, run)
        eff = cfg.efficiency
        items = plan.efficiency_items[eff.protocol] if eff.num_items is None else eff.num_items
        requests = items * (eff.repetitions + eff.warmup) * (len(eff.budgets) + 1)
        arch, reference = ctx.archs[run.model], ctx.archs[plan.decode_reference]
        timing = efficiency_minutes(plan, run.model, arch, reference, requests)
        job.minutes = timing.minutes
        job.notes += [timing.note] if timing.note else []
        one = (1, 1)  # one item at a time
        shape = eval_shape(cfg, {"max_new_tokens": eff.decode_tokens}, 1, plan.visual_tokens, plan.text_tokens, one)
        ctx.check_memory(job, evaluation_estimate(arch, shape, ctx.engine, plan.allocator_overhead_gb), [])
        yield job
