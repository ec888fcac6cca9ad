"""What the training runs' per-step logs and the evaluation predictions say about cost and training dynamics.

* ``training_cost`` (SCOPD Table 9): per training run (and training seed), the mean wall time per training
  sample and the peak memory, from ``<run>/steps.jsonl`` (``training.loop``); then the mean number of generated
  tokens of every cell of one table block, from its ``<bench>.predictions.jsonl`` files.
* ``training_dynamics`` (SCOPD Fig. 7) and ``deviation`` (LT-OPD Fig. 1 middle): per-step metrics of the
  grid seed's run of each method, averaged over windows of ``window`` steps, as a table and a figure.

A run or cell without its file stays as a row whose ``note`` says what is missing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure as MplFigure

from sparsectx.io import read_jsonl
from sparsectx.paths import budget_tag, predictions_path, run_dir, step_log_path
from sparsectx.report.analyses import Figure, SideTable
from sparsectx.report.collect import cell_leaf, method_label, ordered_cells
from sparsectx.report.plots import LEGEND_STYLE, MARKERS, _save_with_vector, caption_markdown
from sparsectx.report.seeds import seed_root
from sparsectx.report.tables import MISSING, NO_RECORD
from sparsectx.workflow import Grid, TrainRun
from sparsectx.workflow.report_specs import ReportSpec

TIME_KEY = "perf/samples_per_s"
"""Training samples per second of one optimizer step (its wall time, rollouts included)."""
MEMORY_KEY = "perf/peak_memory_gb"
"""Peak memory so far: ``torch.cuda.max_memory_allocated`` on a GPU, the process's peak resident set on CPU."""
NO_STEP_LOG = "no per-step log (steps.jsonl): the run has not trained, or predates the log"


def read_step_log(run: Path) -> list[dict[str, Any]] | None:
    """Returns the per-step records of the training directory ``run`` in step order (the last record of a step
    that was logged twice), or None when it has no ``steps.jsonl``."""
    path = step_log_path(run)
    if not path.is_file():
        return None
    by_step = {row["step"]: row for row in read_jsonl(path)}
    return [by_step[step] for step in sorted(by_step)]


def run_cost(records: Sequence[Mapping[str, Any]]) -> tuple[float, float]:
    """Returns (seconds per training sample, peak memory in GB) of one run's per-step records: the mean over
    steps of 1 / samples-per-second (every step has the same number of samples) and the largest peak."""
    seconds = sum(1.0 / row[TIME_KEY] for row in records) / len(records)
    return seconds, max(row[MEMORY_KEY] for row in records)


COST_COLUMNS = ("model", "method", "pruner", "budget", "seed", "steps", "time / sample (s)", "peak memory (GB)", "note")
COST_FOOTNOTE = (
    "Time / sample: the mean over the run's optimizer steps of the step's wall time (rollouts, teacher and "
    "student passes, update) divided by its training samples, from the run's steps.jsonl; peak memory: the "
    "largest over steps of torch.cuda.max_memory_allocated on a GPU, or of the process's peak resident memory "
    "when the run trained on CPU. TFLOPs per sample (SCOPD Table 9's first column) are not reported: the "
    "trainer counts no FLOPs, and the inference FLOP model (efficiency.json) does not cover rollouts and "
    "backward passes. SCOPD measures on a batch of 32 on one L40 GPU; these rows are the runs of this study "
    "as they trained. docs/tables.md"
)


def training_cost_table(
    grid: Grid, spec: ReportSpec, runs_root: str | Path, labels: Mapping[str, str], decimals: int
) -> SideTable:
    """Returns SCOPD Table 9's upper part: one row per training run of ``spec.methods`` and training seed."""
    rows = []
    for run in (r for m in spec.methods for r in grid.train_runs if r.method == m):
        for seed in grid.train_seeds:
            if seed != grid.seed and run not in grid.seeded_runs:
                continue
            root = seed_root(runs_root, seed, grid.seed)
            head = (run.model, method_label(run.method, labels), run.pruner, budget_tag(run.budget), str(seed))
            records = read_step_log(_run_path(root, grid.experiment, run))
            if not records:
                rows.append((*head, "0", MISSING, MISSING, NO_STEP_LOG))
                continue
            seconds, memory = run_cost(records)
            rows.append((*head, str(len(records)), f"{seconds:.{decimals}f}", f"{memory:.{decimals}f}", ""))
    return SideTable(COST_COLUMNS, tuple(rows), footnote=COST_FOOTNOTE, decimals=decimals)


def _run_path(root: str | Path, experiment: str, run: TrainRun) -> Path:
    return run_dir(root, experiment, run.model, run.method, run.pruner, run.budget)


TOKEN_COLUMNS = ("model", "method", "pruner", "budget", "items", "mean output tokens", "note")


def output_tokens(leaf: Path, benchmarks: Sequence[str]) -> tuple[list[int], list[str]]:
    """Returns (generated token count of every item without a generation error, benchmarks without their
    predictions file) over ``benchmarks`` of the results leaf ``leaf``."""
    counts, absent = [], []
    for bench in benchmarks:
        path = predictions_path(leaf, bench)
        if not path.is_file():
            absent.append(bench)
            continue
        counts += [row["num_tokens"] for row in read_jsonl(path) if row["status"] != "error"]
    return counts, absent


def output_tokens_table(
    grid: Grid, spec: ReportSpec, results_root: str | Path, labels: Mapping[str, str], decimals: int
) -> SideTable:
    """Returns SCOPD Table 9's lower part: per cell row of ``spec``'s block (model, method, pruner, budget), the
    mean number of generated tokens over every item of the block's benchmarks (grid seed's checkpoints)."""
    (block,) = [b for b in grid.blocks if b.name == spec.blocks[0]]
    rows = []
    for model in block.models:
        cells = ordered_cells(grid, block, model)
        for method, pruner, budget in dict.fromkeys((c.method, c.pruner, c.budget) for c in cells):
            head = (model, method_label(method, labels), pruner, budget_tag(budget))
            mine = [c for c in cells if (c.method, c.pruner, c.budget) == (method, pruner, budget)]
            reason = next((r for c in mine if (r := grid.reason(c))), None)
            if reason:
                rows.append((*head, "0", MISSING, reason))
                continue
            counts, absent = output_tokens(cell_leaf(results_root, grid.experiment, mine[0]), block.benchmarks)
            note = f"{NO_RECORD}: no predictions of {absent}" if absent else ""
            if not counts or absent:
                rows.append((*head, str(len(counts)), MISSING, note or "no generated item"))
                continue
            rows.append((*head, str(len(counts)), f"{sum(counts) / len(counts):.{decimals}f}", ""))
    footnote = (
        f"Mean output tokens: the generated tokens (model.generate's count, the answer prefix excluded) averaged "
        f"over every item of the benchmarks {list(block.benchmarks)} of table `{block.name}` (the greedy "
        f"evaluation; items whose generation failed are left out); trained rows: the grid seed's checkpoint "
        f"({grid.seed}). SCOPD Table 9 measures it on its 500-item Pass@K diagnostic set. docs/tables.md"
    )
    return SideTable(TOKEN_COLUMNS, tuple(rows), footnote=footnote, decimals=decimals)


@dataclass(frozen=True)
class Panel:
    """One panel of a per-step figure: a title, its curves (label -> step-log key) and whether they are
    fractions shown as percentages."""

    title: str
    curves: Mapping[str, str]
    percent: bool


DYNAMICS_PANELS = (
    Panel(
        "(a) accuracy of sampled responses", {"accuracy": "rollout/accuracy", "Pass@G": "rollout/pass_at_group"}, True
    ),
    Panel(
        "(b) groups of G rollouts",
        {
            "all correct": "rollout/groups_all_correct",
            "mixed": "rollout/groups_mixed",
            "all wrong": "rollout/groups_all_wrong",
        },
        True,
    ),
    Panel(
        "(c) response length (tokens)",
        {"all": "rollout/length", "correct": "rollout/length_correct", "incorrect": "rollout/length_wrong"},
        False,
    ),
    Panel(
        "(d) format and truncation",
        {"format compliance": "rollout/format_rate", "truncated": "rollout/truncated"},
        True,
    ),
)
"""SCOPD Fig. 7's four panels (``rollout/truncated`` is 1 - ``rollout/stop_rate``)."""
DEVIATION_PANELS = (Panel("divergence to the full-context teacher", {"divergence": "train/divergence"}, False),)
"""LT-OPD Fig. 1 middle: the per-token divergence between student and teacher on the student's prefixes."""


def _value(row: Mapping[str, Any], key: str) -> float | None:
    if key == "rollout/truncated":
        stop = row.get("rollout/stop_rate")
        return None if stop is None else 1.0 - stop
    value = row.get(key)
    return None if value is None or not math.isfinite(value) else float(value)


def windows(records: Sequence[Mapping[str, Any]], keys: Sequence[str], size: int) -> list[dict[str, Any]]:
    """Returns one row per window of ``size`` consecutive steps (the last may be shorter): its first and last
    step and, per key, the mean over the window's steps that logged it (None when none did)."""
    out = []
    for start in range(0, len(records), size):
        part = records[start : start + size]
        row: dict[str, Any] = {"first": part[0]["step"], "last": part[-1]["step"]}
        for key in keys:
            found = [v for r in part if (v := _value(r, key)) is not None]
            row[key] = sum(found) / len(found) if found else None
        out.append(row)
    return out


def _curve_keys(panels: Sequence[Panel]) -> list[str]:
    return [key for panel in panels for key in panel.curves.values()]


def dynamics_figure(rows: Sequence[Mapping[str, Any]], panels: Sequence[Panel], title: str) -> MplFigure:
    """Returns the figure of per-window means: one axes per panel, x = each window's last step."""
    fig = MplFigure(figsize=(5.0 * len(panels), 3.6) if len(panels) < 3 else (10.0, 7.0), layout="constrained")
    fig.suptitle(title)
    shape = (1, len(panels)) if len(panels) < 3 else (2, math.ceil(len(panels) / 2))
    for index, panel in enumerate(panels):
        ax = fig.add_subplot(*shape, index + 1)
        ax.set_title(panel.title, fontsize="medium")
        scale = 100.0 if panel.percent else 1.0
        for number, (label, key) in enumerate(panel.curves.items()):
            points = [(r["last"], scale * r[key]) for r in rows if r[key] is not None]
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, marker=MARKERS[number % len(MARKERS)], label=label)
        ax.set_xlabel("optimizer step (end of window)")
        if panel.percent:
            ax.set_ylim(0.0, 104.0)
            ax.set_ylabel("%")
        if ax.lines:
            ax.legend(**{**LEGEND_STYLE, "loc": "best", "bbox_to_anchor": None})
    return fig


DYNAMICS_CAPTION = (
    "Training dynamics of {method} (SCOPD Fig. 7), from the per-step log of its grid-seed run: each marker is the "
    "mean over a window of {window} optimizer steps (x: the window's last step). (a) accuracy of the sampled "
    "responses (the training scorer's exact match) and Pass@G (share of prompts with at least one correct of "
    "their G rollouts); (b) share of groups whose G rollouts are all correct, mixed (the only ones with a "
    "non-zero advantage) or all wrong; (c) mean response length in tokens, of all, correct and incorrect "
    "rollouts; (d) share of rollouts in the <think>/<answer> format, and share cut by max_new_tokens."
)
DEVIATION_CAPTION = (
    "Deviation of the compressed student from its full-context teacher (LT-OPD Fig. 1 middle; the seed text "
    "lacks the figure, so this is our reading of it): the per-token divergence of each method's objective "
    "between the student's next-token distribution at its pruned budget and the teacher's on the same prefixes, "
    "averaged over the distilled positions of each step, then over windows of {window} steps. For on-policy "
    "methods the prefixes are the student's own rollouts, so the first window is the untrained compressed "
    "model's deviation on the states it reaches; its fall is what training recovers."
)


def dynamics_outputs(
    grid: Grid, spec: ReportSpec, runs_root: str | Path, labels: Mapping[str, str], out_dir: Path, decimals: int
) -> tuple[SideTable, list[Figure]]:
    """Returns the per-window table of ``spec``'s methods (grid-seed runs) and one figure per run
    (``training_dynamics``) or per model with one curve per run (``deviation``)."""
    panels = DYNAMICS_PANELS if spec.kind == "training_dynamics" else DEVIATION_PANELS
    keys = _curve_keys(panels)
    names = [label for panel in panels for label in panel.curves]
    columns = ("model", "method", "pruner", "budget", "steps", *names, "note")
    rows: list[tuple[str, ...]] = []
    figures: list[Figure] = []
    by_model: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for run in (r for m in spec.methods for r in grid.train_runs if r.method == m):
        head = (run.model, method_label(run.method, labels), run.pruner, budget_tag(run.budget))
        name = f"{spec.name}_{run.model}_{run.method}_{run.pruner}_{budget_tag(run.budget)}"
        records = read_step_log(_run_path(runs_root, grid.experiment, run))
        if not records:
            rows.append((*head, MISSING, *[MISSING] * len(keys), NO_STEP_LOG))
            if spec.kind == "training_dynamics":  # a deviation figure is per model: listed below when empty
                figures.append(Figure(name, None, NO_STEP_LOG))
            continue
        found = windows(records, keys, spec.window)
        rows += [
            (*head, f"{w['first']}-{w['last']}", *(_shown(w[k], panels, k, decimals) for k in keys), "") for w in found
        ]
        label = " / ".join(head[1:])
        by_model.setdefault(run.model, {})[label] = found
        if spec.kind == "training_dynamics":
            title = f"Training dynamics: {label}, model {run.model}"
            caption = caption_markdown(
                title,
                DYNAMICS_CAPTION.format(method=label, window=spec.window),
                [f"Data: experiment `{grid.experiment}`, {spec.name}.md."],
            )
            path = _save_with_vector(dynamics_figure(found, panels, title), out_dir / f"{name}.png", caption)
            figures.append(Figure(name, path, "", path.with_suffix(".svg")))
    if spec.kind == "deviation":
        figures += [_deviation_plot(grid, spec, model, runs, out_dir) for model, runs in by_model.items()]
        models = dict.fromkeys(r.model for r in grid.train_runs if r.method in spec.methods)
        figures += [Figure(f"{spec.name}_{m}", None, NO_STEP_LOG) for m in models if m not in by_model]
    units = "; ".join(f"{p.title}: {'%' if p.percent else 'as logged'}" for p in panels)
    footnote = f"Means over windows of {spec.window} optimizer steps of the grid-seed run ({grid.seed}); {units}."
    return SideTable(columns, tuple(rows), footnote=footnote + " docs/tables.md", decimals=decimals), figures


def _shown(value: float | None, panels: Sequence[Panel], key: str, decimals: int) -> str:
    """Returns a window mean as the table shows it: a percentage when its panel is one."""
    if value is None:
        return MISSING
    scale = 100.0 if any(key in p.curves.values() and p.percent for p in panels) else 1.0
    return f"{scale * value:.{decimals}f}"


def _deviation_plot(
    grid: Grid, spec: ReportSpec, model: str, runs: Mapping[str, Sequence[Mapping[str, Any]]], out_dir: Path
) -> Figure:
    """Returns the deviation figure of ``model``: one curve per run, the divergence's window means."""
    name = f"{spec.name}_{model}"
    title = f"Student-teacher divergence during training, model {model}"
    fig = MplFigure(figsize=(6.0, 4.0))
    ax = fig.add_subplot()
    ax.set_title(title)
    for number, (label, rows) in enumerate(runs.items()):
        points = [(r["last"], r["train/divergence"]) for r in rows if r["train/divergence"] is not None]
        if points:
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, marker=MARKERS[number % len(MARKERS)], label=label)
    ax.set_xlabel("optimizer step (end of window)")
    ax.set_ylabel("per-token divergence")
    ax.set_ylim(bottom=0.0)
    ax.legend(**LEGEND_STYLE)
    notes = [f"Data: experiment `{grid.experiment}`, {spec.name}.md (each method's own divergence)."]
    caption = caption_markdown(title, DEVIATION_CAPTION.format(window=spec.window), notes)
    path = _save_with_vector(fig, out_dir / f"{name}.png", caption)
    return Figure(name, path, "", path.with_suffix(".svg"))
