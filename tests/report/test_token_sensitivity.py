"""``token_sensitivity`` (SCOPD Fig. 2a, Fig. 6) from traces the trainer's own writer (``TokenTrace``) produced on
small random logits: the table's Spearman correlation and top-ρ overlap against independent references, the
figures, and the errors naming the file and the setting when a run did not trace or has no sensitivity."""

from __future__ import annotations

import math
import random
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from sparsectx import workflow as wf
from sparsectx.io import append_jsonl, read_jsonl
from sparsectx.paths import run_dir, step_log_path, token_trace_path
from sparsectx.report.study import run
from sparsectx.report.token_stats import average_ranks, jaccard, phase_stats, spearman, top_count, top_positions
from sparsectx.training.positions import positions_per_sequence, select_top_fraction
from sparsectx.training.token_trace import TokenTrace

from .test_intervals import GRID, results  # noqa: F401 (fixture)
from .test_report_entries import compose_tables, read_csv

LAST = 5
"""The traced run's last step."""
FRACTION = 0.25
LENGTHS = (12, 9, 5)
"""Response lengths of the three traced rollouts of a step."""
REPORT = {"tokens": {"kind": "token_sensitivity", "methods": ["scopd"], "items": 2}}
PIECES = {0: "\n", 1: "$x$", 2: "  ", 3: "answer", 4: "你好"}
"""Token texts a strip must draw literally (a line break, a dollar sign, blanks, a word, a script the font lacks)."""


def fake_tokenizer() -> SimpleNamespace:
    """Returns a tokenizer whose ``decode`` maps one id to ``PIECES`` or ``t<id>``."""
    return SimpleNamespace(decode=lambda ids, skip_special_tokens: PIECES.get(ids[0], f"t{ids[0]}"))


def write_traces(run: Path, *, sensitivity: bool = True, steps: tuple[int, ...] = (1, LAST)) -> None:
    """Appends, per step, three rollouts traced by ``TokenTrace`` from seeded logits (V = 7), as the loop does."""
    generator = torch.Generator().manual_seed(0)
    cfg = SimpleNamespace(
        method=SimpleNamespace(
            divergence=SimpleNamespace(chunk_size=4, temperature=1.0), positions=SimpleNamespace(fraction=FRACTION)
        )
    )
    width = max(LENGTHS)
    valid = torch.arange(width)[None, :] < torch.tensor(LENGTHS)[:, None]
    for step in steps:
        student = torch.randn(len(LENGTHS), width, 7, generator=generator)
        teacher = student + 1.5 * torch.randn(student.shape, generator=generator)
        sens = torch.rand(valid.shape, generator=generator) * math.log(2) * valid if sensitivity else None
        selected = select_top_fraction(sens, valid, FRACTION) if sens is not None else valid
        mb = SimpleNamespace(
            items=[SimpleNamespace(index=i, question=f"q{i}", answer="a") for i in range(len(LENGTHS))],
            encoded=[SimpleNamespace(sample_id=f"{i}@{i}") for i in range(len(LENGTHS))],
            positions=[0, 1, 2],
            prefix=SimpleNamespace(texts=["r0", "r1", "r2"], stopped=[True, False, True]),
            ids=torch.randint(0, 6, valid.shape, generator=generator),
            valid=valid,
        )
        trace = TokenTrace(step, 3)
        trace.add(cfg, fake_tokenizer(), mb, student, teacher, sens, selected)
        append_jsonl(token_trace_path(run), trace.records(0.1))


def scopd_run(results_root: Path) -> Path:
    """Returns the grid's trained run directory (SCOPD at 10%) beside ``results_root``, with a per-step log (the
    run has trained)."""
    path = run_dir(results_root.parent / "runs", "tiny", "tiny", "scopd", "visionzip", 0.1)
    append_jsonl(step_log_path(path), [{"step": step, "train/loss": 1.0} for step in range(1, LAST + 1)])
    return path


def brute_spearman(x: list[float], y: list[float]) -> float:
    """Returns Spearman's correlation from ranks counted pair by pair (ties: the mean of the tied places)."""

    def ranks(v: list[float]) -> list[float]:
        return [sum(b < a for b in v) + (sum(b == a for b in v) + 1) / 2 for a in v]

    return float(np.corrcoef(ranks(x), ranks(y))[0, 1])


def test_the_table_and_figures_show_the_traced_steps(results: Path) -> None:  # noqa: F811
    write_traces(scopd_run(results))
    paths = run(compose_tables(results.parent, {**GRID, "report": REPORT}))
    out = results / "tiny" / "tables"
    rows = read_csv(out / "tokens.csv")
    assert [(r["student"], r["step"], r["rollouts"], r["tokens"]) for r in rows] == [
        ("untrained", "1", "3", str(sum(LENGTHS))),
        ("trained", str(LAST), "3", str(sum(LENGTHS))),
    ]
    lines = read_jsonl(token_trace_path(scopd_run(results)))
    for row, step in zip(rows, (1, LAST), strict=True):
        mine = [line for line in lines if line["step"] == step]
        kl = [v for line in mine for v in line["kl"]]
        sens = [v for line in mine for v in line["sensitivity"]]
        assert float(row["Spearman (KL, S)"]) == pytest.approx(brute_spearman(kl, sens), abs=5e-3)
        overlaps = []
        for line in mine:  # the method's own top-ρ selector picks both sets
            scores = torch.tensor([line["kl"], line["sensitivity"]])
            picked = select_top_fraction(scores, torch.ones_like(scores, dtype=torch.bool), FRACTION)
            a, b = (set(torch.nonzero(p).flatten().tolist()) for p in picked)
            overlaps.append(len(a & b) / len(a | b))
        assert float(row["top-ρ Jaccard"]) == pytest.approx(sum(overlaps) / len(overlaps), abs=5e-3)
        assert row["ρ"] == "0.25" and row["note"] == ""
    name = "tokens_tiny_scopd_visionzip_0.1"
    for stem in (f"{name}_untrained", f"{name}_trained", f"{name}_scatter"):
        for suffix in (".png", ".svg", ".caption.md"):
            assert out / f"{stem}{suffix}" in paths
    assert "SCOPD Fig. 2a" in (out / "tokens.md").read_text()


@pytest.mark.parametrize(
    ("write", "message"),
    [
        (None, r"token_traces.jsonl is missing.*token_trace=<rollouts>.*grid.overrides.train"),
        ({"sensitivity": False}, r"token_traces.jsonl has no visual sensitivity: method 'scopd' runs no b\+δ probe"),
        ({"steps": (LAST,)}, r"token_traces.jsonl traces steps \[5\]; token_sensitivity needs the first"),
    ],
    ids=["no traces", "no sensitivity", "no first step"],
)
def test_a_run_without_usable_traces_is_an_error_naming_the_file(results: Path, write, message: str) -> None:  # noqa: ANN001, F811
    trained = scopd_run(results)
    if write is not None:
        write_traces(trained, **write)
    with pytest.raises(ValueError, match=message):
        run(compose_tables(results.parent, {**GRID, "report": REPORT}))


def test_a_run_that_has_not_trained_is_a_row_that_says_so(results: Path) -> None:  # noqa: F811
    paths = run(compose_tables(results.parent, {**GRID, "report": REPORT}))
    (row,) = read_csv(results / "tiny" / "tables" / "tokens.csv")
    assert row["Spearman (KL, S)"] == "—" and "steps.jsonl" in row["note"]
    assert not any(path.name.startswith("tokens_tiny") for path in paths)


def test_spearman_matches_pair_counted_ranks_and_the_closed_form() -> None:
    rng = random.Random(0)
    for n in (2, 3, 10, 40):
        x = [float(rng.randint(0, 4)) for _ in range(n)]  # many ties
        y = [float(rng.randint(0, 4)) for _ in range(n)]
        if len(set(x)) > 1 and len(set(y)) > 1:
            assert spearman(x, y) == pytest.approx(brute_spearman(x, y), abs=1e-12)
        u = rng.sample(range(1000), n)
        v = rng.sample(range(1000), n)
        d = [a - b for a, b in zip(average_ranks(u), average_ranks(v), strict=True)]
        assert spearman(u, v) == pytest.approx(1 - 6 * sum(t * t for t in d) / (n * (n * n - 1)), abs=1e-12)
    assert average_ranks([3.0, 1.0, 3.0, 2.0]) == [3.5, 1.0, 3.5, 2.0]
    assert math.isnan(spearman([1.0, 1.0], [1.0, 2.0]))


def test_top_positions_are_the_selectors_and_jaccard_counts_overlap() -> None:
    rng = random.Random(1)
    for length in range(1, 30):
        for fraction in (0.1, 0.25, 1 / 3, 1.0):
            values = [rng.random() for _ in range(length)]
            mask = torch.ones(1, length, dtype=torch.bool)
            assert top_count(length, fraction) == int(positions_per_sequence(mask, fraction)[0])
            picked = select_top_fraction(torch.tensor([values]), mask, fraction)[0]
            assert top_positions(values, fraction) == set(torch.nonzero(picked).flatten().tolist())
    assert jaccard(frozenset({1, 2}), frozenset({2, 3})) == pytest.approx(1 / 3)
    assert jaccard(frozenset(), frozenset()) == 1.0


def test_phase_stats_pool_tokens_and_average_overlaps() -> None:
    lines = [
        {"step": 1, "fraction": 0.5, "kl": [3.0, 2.0, 1.0, 0.0], "sensitivity": [0.0, 1.0, 2.0, 3.0]},
        {"step": 1, "fraction": 0.5, "kl": [1.0, 2.0], "sensitivity": [1.0, 2.0]},
    ]
    stats = phase_stats(lines)
    assert (stats.rollouts, stats.tokens) == (2, 6)
    assert stats.jaccard == pytest.approx((0.0 + 1.0) / 2)  # opposite halves; the same top position
    assert stats.spearman == pytest.approx(brute_spearman([3, 2, 1, 0, 1, 2], [0, 1, 2, 3, 1, 2]))


def test_the_entry_takes_methods_and_items() -> None:
    with pytest.raises(ValueError, match=r"kind 'token_sensitivity' takes exactly \['methods', 'items'\]"):
        wf.load_grid("tiny", {**GRID, "report": {"x": {"kind": "token_sensitivity", "methods": ["scopd"]}}})
    grid = wf.load_grid("tiny", {**GRID, "report": REPORT})
    assert (grid.report["tokens"].methods, grid.report["tokens"].items) == (("scopd",), 2)
