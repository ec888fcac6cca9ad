"""Plots: valid PNGs without pyplot, one title, measured points only, the full context as a labelled reference,
percentage axes from 0 to 100, and the notes in a caption file instead of under the axes."""

import inspect
import struct

import pytest
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from sparsectx.eval.passk import pass_at_k_curve
from sparsectx.report import plots
from sparsectx.report.plots import (
    PERCENT_HEADROOM,
    REFERENCE_LABEL,
    caption_path,
    measured_segments,
    pass_at_k_figure,
    plot_pass_at_k,
    plot_retain_vs_budget,
    retain_figure,
    retain_series,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
BUDGETS = [0.05, 0.1, 0.2, 1.0]
"""The budgets ``_records`` measures: SCOPD at 100% too, Vanilla only as the full-context reference."""


def _png_size(path):
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    assert data.rstrip(b"\x00")[-8:-4] == b"IEND"
    return struct.unpack(">II", data[16:24])


def _records():
    scores = {
        ("Vanilla", "none", 1.0): {"A": 60.0, "B": 80.0},
        ("Vanilla", "vz", 0.2): {"A": 54.0, "B": 76.0},
        ("Vanilla", "vz", 0.1): {"A": 45.0, "B": 70.0},
        ("Vanilla", "vz", 0.05): {"A": 36.0, "B": 60.0},
        ("SCOPD", "vz", 1.0): {"A": 60.0, "B": 78.0},
        ("SCOPD", "vz", 0.2): {"A": 57.0, "B": 79.0},
        ("SCOPD", "vz", 0.1): {"A": 52.0},  # B missing: this point cannot be drawn
        ("SCOPD", "vz", 0.05): {"A": 48.0, "B": 72.0},
    }
    return [
        dict(method=m, pruner=p, budget=b, benchmark=bench, score=s, scorer_version=1)
        for (m, p, b), row in scores.items()
        for bench, s in row.items()
    ]


def _legend_lines(fig: Figure) -> dict[str, list[Line2D]]:
    """Returns legend label -> the lines of that series (a series' extra segments carry ``_<label>``)."""
    (ax,) = fig.axes
    lines: dict[str, list[Line2D]] = {}
    for line in ax.get_lines():
        lines.setdefault(line.get_label().removeprefix("_"), []).append(line)
    assert set(ax.get_legend_handles_labels()[1]) == set(lines)
    return lines


def _titles(fig: Figure) -> list[str]:
    """Returns every non-empty title and free text of the figure (suptitle, axes titles, annotations)."""
    (ax,) = fig.axes
    texts = [ax.get_title(loc) for loc in ("left", "center", "right")]
    texts += [t.get_text() for t in (*fig.texts, *ax.texts)]
    texts += [fig._suptitle.get_text()] if fig._suptitle is not None else []
    return [t for t in texts if t]


def _retain_figure() -> Figure:
    series, _ = retain_series(_records())
    return retain_figure(series, BUDGETS, title="Retain ratio vs. budget: toy")


def test_retain_series_leaves_out_the_reference_and_reports_skipped_points():
    series, skipped = retain_series(_records())
    assert set(series) == {"Vanilla / vz", "SCOPD / vz"}  # no "Vanilla / none": the reference is no series
    assert series["Vanilla / vz"] == pytest.approx({0.2: (90 + 95) / 2, 0.1: (75 + 87.5) / 2, 0.05: 67.5})
    assert series["SCOPD / vz"] == pytest.approx({1.0: 98.75, 0.2: (95 + 98.75) / 2, 0.05: 85.0})
    assert skipped == ["SCOPD / vz / 10%: the average needs a score on every benchmark"]


def test_measured_segments_never_cross_an_unmeasured_budget_or_reach_full_context():
    assert measured_segments([0.05, 0.2, 1.0], BUDGETS, joinable=1.0) == [[0.05], [0.2], [1.0]]
    assert measured_segments([0.05, 0.1, 0.2, 1.0], BUDGETS, joinable=1.0) == [[0.05, 0.1, 0.2], [1.0]]
    assert measured_segments([4, 1, 2], [1, 2, 4, 8]) == [[1, 2, 4]]


def test_retain_lines_hold_measured_budgets_only():
    lines = _legend_lines(_retain_figure())
    measured = {"Vanilla / vz": {5, 10, 20}, "SCOPD / vz": {5, 20, 100}}
    for label, budgets in measured.items():
        xs = [[round(x, 6) for x in line.get_xdata()] for line in lines[label]]
        assert {x for run in xs for x in run} == budgets
        assert all(len(run) == 1 for run in xs if 100 in run)  # 100% is never joined to a pruned budget
    scopd = sorted(len(line.get_xdata()) for line in lines["SCOPD / vz"])
    assert scopd == [1, 1, 1]  # 10% has no average, so 5% and 20% are not joined across it


def test_full_context_is_one_labelled_reference_line_and_no_pruner_point():
    lines = _legend_lines(_retain_figure())
    (reference,) = lines[REFERENCE_LABEL]
    assert list(reference.get_ydata()) == [100.0, 100.0] and reference.get_linestyle() == "--"
    assert not any("none" in label for label in lines)  # the full-context row names no pruner


def test_retain_figure_has_one_title_no_text_under_the_axes_and_a_0_to_100_axis():
    fig = _retain_figure()
    (ax,) = fig.axes
    assert _titles(fig) == ["Retain ratio vs. budget: toy"]
    assert not fig.texts and not ax.texts
    assert ax.get_ylim() == (0.0, 100.0 + PERCENT_HEADROOM)
    assert list(ax.get_yticks()) == [0, 20, 40, 60, 80, 100]
    assert [round(x, 6) for x in ax.get_xticks()] == [5, 10, 20, 100]


def test_retain_axis_grows_past_100_instead_of_clipping():
    fig = retain_figure({"SCOPD / vz": {0.1: 104.0, 0.2: 99.0}}, [0.1, 0.2], title="toy")
    (ax,) = fig.axes
    assert ax.get_ylim()[0] == 0.0 and ax.get_ylim()[1] >= 104.0
    assert max(ax.get_yticks()) == 120


def test_pass_at_k_axis_spans_0_to_100_with_full_context_and_greedy_references():
    curves = {"Vanilla / vz / 10%": {1: 0.46, 2: 0.48, 4: 0.50}}
    fig = pass_at_k_figure(
        curves, title="Pass@k: toy", full_context={1: 0.9, 2: 0.95, 4: 1.0}, references={"greedy": 0.47}
    )
    (ax,) = fig.axes
    assert ax.get_ylim() == (0.0, 100.0 + PERCENT_HEADROOM)  # not auto-scaled to 46-50%
    lines = _legend_lines(fig)
    assert list(lines[REFERENCE_LABEL][0].get_xdata()) == [1, 2, 4]
    assert list(lines["greedy"][0].get_ydata()) == pytest.approx([47.0, 47.0])  # horizontal, not per k
    assert list(lines["Vanilla / vz / 10%"][0].get_xdata()) == [1, 2, 4]
    assert _titles(fig) == ["Pass@k: toy"] and not fig.texts


def test_notes_go_to_the_caption_file(tmp_path):
    out = plot_retain_vs_budget(_records(), tmp_path / "plots" / "retain.png", title="toy", notes=["Data: x."])
    width, height = _png_size(out)
    assert width > 100 and height > 100
    caption = caption_path(out)
    assert caption == tmp_path / "plots" / "retain.caption.md"
    text = caption.read_text()
    assert text.startswith("# toy\n") and "Data: x." in text
    assert "- not drawn: SCOPD / vz / 10%: the average needs a score on every benchmark" in text
    assert not list(out.parent.glob(".*tmp*"))  # atomic writes leave no temporary file


def test_pass_at_k_plot_is_a_png_with_a_caption(tmp_path):
    curves = {
        "Vanilla": pass_at_k_curve([[True, False, False, False], [False] * 4]),
        "SCOPD": pass_at_k_curve([[True, True, False, False], [False, False, False, True]]),
    }
    out = plot_pass_at_k(curves, tmp_path / "passk.png", title="toy", notes=["full-context curve not drawn"])
    width, height = _png_size(out)
    assert width > 100 and height > 100
    assert "- full-context curve not drawn" in caption_path(out).read_text()


def test_no_pyplot_png_suffix_and_a_title_required(tmp_path):
    source = inspect.getsource(plots)  # Agg canvas only, no global pyplot state
    assert "matplotlib.pyplot" not in source and "import pyplot" not in source
    with pytest.raises(ValueError, match=r"\.png"):
        plot_pass_at_k({"x": {1: 0.5}}, tmp_path / "passk.pdf", title="toy")
    with pytest.raises(ValueError, match="title"):
        pass_at_k_figure({"x": {1: 0.5}}, title=" ")
