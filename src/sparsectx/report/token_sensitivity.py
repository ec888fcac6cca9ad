"""``token_sensitivity`` (SCOPD Fig. 2a, Fig. 6): teacher–student KL against visual sensitivity along responses,
for the untrained and the trained student, from the per-token traces the training runs write.

Each run of ``spec.methods`` (the grid seed's) that has trained (``steps.jsonl``) must have traced
(``token_trace`` > 0: ``<run>/token_traces.jsonl``, ``sparsectx.training.token_trace``) with a sensitivity
probe; otherwise rendering raises, naming the file and the setting (a run not trained yet is a row with a note).
Its first step's traces are the untrained student (step 1: before any update), its last step's the trained one.
Per run:

* ``<name>_<model>_<method>_<pruner>_<budget>_untrained|_trained.png|.svg``: Fig. 6-style token strips, the first
  ``spec.items`` traced rollouts of the step, each response token in two rows, coloured by KL(teacher‖student)
  (SCOPD Eq. 4) and by S (Eq. 7), the positions the step distilled framed;
* ``<name>_<...>_scatter.png|.svg``: KL against S of every traced token of both steps, with the Spearman
  correlation and the top-ρ overlap (``sparsectx.report.token_stats``);
* one row per (run, step) in the page ``<name>.md|.tex|.csv``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib import colormaps
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure as MplFigure
from matplotlib.patches import Rectangle
from matplotlib.ticker import NullFormatter

from sparsectx.io import read_jsonl
from sparsectx.paths import budget_tag, run_dir, step_log_path, token_trace_path
from sparsectx.report.analyses import Figure, SideTable
from sparsectx.report.collect import method_label
from sparsectx.report.plots import _save_with_vector, caption_markdown
from sparsectx.report.tables import MISSING
from sparsectx.report.token_stats import PhaseStats, phase_stats
from sparsectx.report.training_report import NO_STEP_LOG
from sparsectx.workflow import Grid, TrainRun
from sparsectx.workflow.report_specs import ReportSpec

PHASES = ("untrained", "trained")
"""The two traced steps: the first (no update yet) and the last."""
STRIP_WIDTH = 24
"""Tokens per line of a strip."""
STRIP_TOKENS = 144
"""Tokens shown per rollout (the first ones); the statistics use every token."""
FLOOR = 1e-8
"""Smallest value drawn on the scatter's log axes (smaller values, and 0, are drawn at it)."""
COLUMNS = (
    "model",
    "method",
    "pruner",
    "budget",
    "student",
    "step",
    "rollouts",
    "tokens",
    "ρ",
    "Spearman (KL, S)",
    "top-ρ Jaccard",
    "mean KL",
    "mean S",
    "note",
)


def phase_traces(run: Path, method: str) -> dict[str, list[dict[str, Any]]]:
    """Returns {"untrained": the first step's traced rollouts, "trained": the last step's} of the training
    directory ``run``.

    Raises:
        ValueError: no traces (naming the file and ``token_trace``), traces without sensitivity or KL (the
            method has no b+δ probe or no teacher), or traces of one step only.
    """
    path = token_trace_path(run)
    if not path.is_file():
        raise ValueError(
            f"{path} is missing: report kind token_sensitivity reads the per-token traces of method {method!r}; "
            "turn them on with the train override token_trace=<rollouts> (conf/train.yaml; in a preset: "
            f"grid.overrides.train) and train the run again from step 0 (a finished run resumes without a step: "
            f"remove {run}/state and {run}/checkpoint first)"
        )
    lines = read_jsonl(path)
    if any(line["sensitivity"] is None for line in lines):
        raise ValueError(
            f"{path} has no visual sensitivity: method {method!r} runs no b+δ probe (method.positions.name is not "
            "a sensitivity rule); list in a token_sensitivity entry's methods only methods that probe, e.g. "
            "scopd_plus (method.positions.name=top_sensitivity)"
        )
    if any(line["kl"] is None for line in lines):
        raise ValueError(f"{path} has no KL: method {method!r} distils from no teacher; list a method with one")
    steps = sorted({line["step"] for line in lines})
    if 1 not in steps or len(steps) < 2:
        raise ValueError(
            f"{path} traces steps {steps}; token_sensitivity needs the first (1) and the last: train the run from "
            f"step 0 with token_trace=<rollouts> and steps >= 2 (remove {run}/state and {run}/checkpoint first)"
        )
    by_phase = {"untrained": steps[0], "trained": steps[-1]}
    return {
        phase: sorted((line for line in lines if line["step"] == step), key=lambda line: line["rollout"])
        for phase, step in by_phase.items()
    }


def shown_piece(piece: str) -> str:
    """Returns a token's text as a strip cell shows it: line breaks and tabs as symbols, blanks as ␣, at most
    eight characters."""
    text = piece.replace("\n", "↵").replace("\t", "⇥").strip(" ")
    if not text:
        return "␣"
    return text if len(text) <= 8 else text[:7] + "…"


def _limit(lines: Sequence[Mapping[str, Any]], key: str) -> float:
    top = max((v for line in lines for v in line[key][:STRIP_TOKENS]), default=0.0)
    return top if top > 0.0 else 1.0


def strip_figure(lines: Sequence[Mapping[str, Any]], title: str) -> MplFigure:
    """Returns the token strips of ``lines`` (traced rollouts): per rollout a header, then per line of
    ``STRIP_WIDTH`` tokens a KL row and an S row; colours scale to the largest value shown, framed cells are the
    positions the step distilled."""
    norms = {key: Normalize(0.0, _limit(lines, key)) for key in ("kl", "sensitivity")}
    cmaps = {"kl": colormaps["Reds"], "sensitivity": colormaps["Blues"]}
    heights = [1 + 3 * math.ceil(min(len(line["tokens"]), STRIP_TOKENS) / STRIP_WIDTH) for line in lines]
    total = sum(heights) + 0.5
    fig = MplFigure(figsize=(0.5 * STRIP_WIDTH + 1.0, 0.24 * total + 1.6), layout="constrained")
    fig.suptitle(title)
    ax = fig.add_subplot()
    ax.set_xlim(-1.5, STRIP_WIDTH)
    ax.set_ylim(total, 0.0)
    ax.axis("off")
    top = 0.0
    for line, height in zip(lines, heights, strict=True):
        n = min(len(line["tokens"]), STRIP_TOKENS)
        header = (
            f"item {line['item']}: {len(line['tokens'])} tokens ({n} shown), {sum(line['selected'])} "
            f"distilled. Q: {line['question'][:90]}"
        )
        ax.text(-1.5, top + 0.6, header, fontsize=7, va="center", parse_math=False)
        for t in range(n):
            col, row = t % STRIP_WIDTH, t // STRIP_WIDTH
            for offset, key in ((1, "kl"), (2, "sensitivity")):
                y = top + 3 * row + offset
                level = norms[key](line[key][t])
                framed = key == "sensitivity" and line["selected"][t]
                edge = {"edgecolor": "black", "linewidth": 1.2} if framed else {"edgecolor": "white", "linewidth": 0.4}
                ax.add_patch(Rectangle((col, y), 1.0, 1.0, facecolor=cmaps[key](level), **edge))
                ax.text(
                    col + 0.5,
                    y + 0.5,
                    shown_piece(line["tokens"][t]),
                    fontsize=5,
                    ha="center",
                    va="center",
                    color="white" if level > 0.6 else "black",
                    parse_math=False,
                )
        for row in range(math.ceil(n / STRIP_WIDTH)):
            ax.text(-0.2, top + 3 * row + 1.5, "KL", fontsize=6, ha="right", va="center")
            ax.text(-0.2, top + 3 * row + 2.5, "S", fontsize=6, ha="right", va="center")
        top += height
    for key, label in (("kl", "KL(teacher ‖ student)"), ("sensitivity", "visual sensitivity S")):
        bar = fig.colorbar(
            ScalarMappable(norms[key], cmaps[key]), ax=ax, orientation="horizontal", shrink=0.45, aspect=40, pad=0.01
        )
        bar.set_label(label, fontsize=7)
    return fig


def scatter_figure(phases: Mapping[str, tuple[Sequence[Mapping[str, Any]], PhaseStats]], title: str) -> MplFigure:
    """Returns KL against S of every traced token, one panel per step (untrained, trained), the distilled
    positions marked apart; log axes, values below ``FLOOR`` drawn at it."""
    fig = MplFigure(figsize=(10.0, 4.2), layout="constrained")
    fig.suptitle(title)
    for index, (phase, (lines, stats)) in enumerate(phases.items()):
        ax = fig.add_subplot(1, len(phases), index + 1)
        for chosen, style in (
            (False, {"s": 6, "alpha": 0.35, "color": "tab:grey", "label": "not distilled"}),
            (True, {"s": 10, "alpha": 0.8, "color": "tab:red", "label": "distilled"}),
        ):
            points = [
                (max(s, FLOOR), max(k, FLOOR))
                for line in lines
                for k, s, sel in zip(line["kl"], line["sensitivity"], line["selected"], strict=True)
                if sel == chosen
            ]
            if points:
                xs, ys = zip(*points, strict=True)
                ax.scatter(xs, ys, marker="o", linewidths=0, **style)
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis, (low, high) in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            if high >= 10.0 * low:  # a decade's labels are enough; below one the minor ticks keep theirs
                axis.set_minor_formatter(NullFormatter())
        ax.set_title(
            f"{phase} (step {stats.step}): Spearman {stats.spearman:.2f}, top-{stats.fraction:g} Jaccard "
            f"{stats.jaccard:.2f}",
            fontsize="medium",
        )
        ax.set_xlabel("visual sensitivity S = JSD(p_b, p_b+δ)")
        ax.set_ylabel("KL(teacher ‖ student)")
        ax.legend(fontsize="small", loc="best")
    return fig


STRIP_CAPTION = (
    "Token strips of {label}, {phase} student (step {step}; SCOPD Fig. 6): the first {items} rollouts the run "
    "traced at that step, each response token twice, its cell coloured by the full-vocabulary KL(teacher ‖ "
    "student) at its position (upper row, SCOPD Eq. 4, the teacher on the full visual context) and by the "
    "visual sensitivity S = JSD(p_b, p_b+δ) of the student (lower row, Eq. 7); colours scale to the largest value "
    "shown. Framed cells are the positions the step distilled. At most {tokens} tokens per rollout are shown."
)
SCATTER_CAPTION = (
    "KL(teacher ‖ student) against visual sensitivity S for every token of the rollouts {label} traced at its "
    "first step (untrained) and its last (trained) (SCOPD Fig. 2a): high-KL positions with low S are "
    "disagreement that more visual evidence does not move. Each panel's title gives the Spearman correlation over "
    "its tokens and the mean over rollouts of the Jaccard overlap of the top-ρ positions by KL and by S "
    "(⌈ρ·T⌉ each, ρ = the method's positions fraction). Log axes; values below {floor:g} are drawn at {floor:g}."
)


def _number(value: float, spec: str) -> str:
    return MISSING if not math.isfinite(value) else format(value, spec)


def _draw(fig: MplFigure, path: Path, caption: str) -> Figure:
    """Returns the saved figure (PNG, SVG, caption); a glyph the font lacks (a token's script) is drawn as a box."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .* missing from font")
        out = _save_with_vector(fig, path, caption)
    return Figure(path.stem, out, "", out.with_suffix(".svg"))


def run_outputs(
    grid: Grid,
    spec: ReportSpec,
    run: TrainRun,
    runs_root: str | Path,
    labels: Mapping[str, str],
    out_dir: Path,
    decimals: int,
) -> tuple[list[tuple[str, ...]], list[Figure]]:
    """Returns one run's table rows (untrained, trained) and its three figures (strips per step, scatter)."""
    path = run_dir(runs_root, grid.experiment, run.model, run.method, run.pruner, run.budget)
    traces = phase_traces(path, run.method)
    stats = {phase: phase_stats(lines) for phase, lines in traces.items()}
    head = (run.model, method_label(run.method, labels), run.pruner, budget_tag(run.budget))
    label = " / ".join(head[1:]) + f", model {run.model}"
    name = f"{spec.name}_{run.model}_{run.method}_{run.pruner}_{budget_tag(run.budget)}"
    data = f"Data: experiment `{grid.experiment}`, {token_trace_path(path)}; {spec.name}.md."
    rows, figures = [], []
    for phase, lines in traces.items():
        s = stats[phase]
        correlations = (_number(s.spearman, f".{decimals}f"), _number(s.jaccard, f".{decimals}f"))
        means = (_number(s.mean_kl, f".{decimals + 1}g"), _number(s.mean_sensitivity, f".{decimals + 1}g"))
        counts = (str(s.step), str(s.rollouts), str(s.tokens), f"{s.fraction:g}")
        rows.append((*head, phase, *counts, *correlations, *means, ""))
        shown = lines[: spec.items]
        title = f"KL and visual sensitivity per token: {label}, {phase} (step {s.step})"
        text = STRIP_CAPTION.format(label=label, phase=phase, step=s.step, items=len(shown), tokens=STRIP_TOKENS)
        figures.append(
            _draw(strip_figure(shown, title), out_dir / f"{name}_{phase}.png", caption_markdown(title, text, [data]))
        )
    title = f"KL against visual sensitivity per token: {label}"
    scatter = scatter_figure({p: (traces[p], stats[p]) for p in PHASES}, title)
    caption = caption_markdown(title, SCATTER_CAPTION.format(label=label, floor=FLOOR), [data])
    figures.append(_draw(scatter, out_dir / f"{name}_scatter.png", caption))
    return rows, figures


FOOTNOTE = (
    "Per training run (grid seed) and traced step: untrained = step 1 (the student before any update), trained = "
    "the last step (after all updates but the last). KL: the full-vocabulary KL(teacher ‖ student) per response "
    "token (SCOPD Eq. 4, the method's divergence temperature); S: the visual sensitivity JSD(p_b, p_b+δ) (Eq. 7). "
    "Spearman: the rank correlation of KL and S over every traced token of the step; top-ρ Jaccard: the mean over "
    "rollouts of |A ∩ B| / |A ∪ B|, A and B the ⌈ρ·T⌉ positions with the largest KL and S. From each run's "
    "token_traces.jsonl (train override token_trace). docs/tables.md"
)


def token_sensitivity_outputs(
    grid: Grid, spec: ReportSpec, runs_root: str | Path, labels: Mapping[str, str], out_dir: Path, decimals: int
) -> tuple[SideTable, list[Figure]]:
    """Returns the table of every run of ``spec.methods`` (two rows each) and their figures (already written); a
    run that has not trained (no ``steps.jsonl``) is a row whose note says so, its figures listed as not drawn.

    Raises:
        ValueError: a run that trained lacks its traces, or they lack sensitivity (``phase_traces``).
    """
    rows: list[tuple[str, ...]] = []
    figures: list[Figure] = []
    for run in (r for m in spec.methods for r in grid.train_runs if r.method == m):
        path = run_dir(runs_root, grid.experiment, run.model, run.method, run.pruner, run.budget)
        if not step_log_path(path).is_file():
            head = (run.model, method_label(run.method, labels), run.pruner, budget_tag(run.budget))
            rows.append((*head, *[MISSING] * (len(COLUMNS) - 5), NO_STEP_LOG))
            name = f"{spec.name}_{run.model}_{run.method}_{run.pruner}_{budget_tag(run.budget)}"
            figures += [Figure(f"{name}_{part}", None, NO_STEP_LOG) for part in (*PHASES, "scatter")]
            continue
        found, drawn = run_outputs(grid, spec, run, runs_root, labels, out_dir, decimals)
        rows += found
        figures += drawn
    return SideTable(COLUMNS, tuple(rows), footnote=FOOTNOTE, decimals=decimals), figures
