"""Plots are written as valid PNG files, without pyplot, and skipped points are reported."""

import inspect
import struct

import pytest

from sparsectx.eval.passk import pass_at_k_curve
from sparsectx.report import plots
from sparsectx.report.plots import plot_pass_at_k, plot_retain_vs_budget, retain_series

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


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
        ("SCOPD", "vz", 0.2): {"A": 57.0, "B": 79.0},
        ("SCOPD", "vz", 0.1): {"A": 52.0},  # B missing: this point cannot be drawn
    }
    return [
        dict(method=m, pruner=p, budget=b, benchmark=bench, score=s, scorer_version=1)
        for (m, p, b), row in scores.items()
        for bench, s in row.items()
    ]


def test_retain_series_and_skipped_points():
    series, skipped = retain_series(_records())
    assert series["Vanilla / vz"] == pytest.approx({0.2: (90 + 95) / 2, 0.1: (75 + 87.5) / 2})
    assert series["SCOPD / vz"] == pytest.approx({0.2: (95 + 98.75) / 2})
    assert skipped == ["SCOPD / vz / 10%: the average needs a score on every benchmark"]


def test_retain_plot_is_a_png(tmp_path):
    out = plot_retain_vs_budget(_records(), tmp_path / "plots" / "retain.png", title="toy")
    width, height = _png_size(out)
    assert width > 100 and height > 100
    assert not list(out.parent.glob(".*tmp*"))  # atomic write leaves no temporary file


def test_pass_at_k_plot_is_a_png(tmp_path):
    curves = {
        "Vanilla": pass_at_k_curve([[True, False, False, False], [False] * 4]),
        "SCOPD": pass_at_k_curve([[True, True, False, False], [False, False, False, True]]),
    }
    width, height = _png_size(plot_pass_at_k(curves, tmp_path / "passk.png"))
    assert width > 100 and height > 100


def test_no_pyplot_and_png_suffix_required(tmp_path):
    source = inspect.getsource(plots)  # Agg canvas only, no global pyplot state
    assert "matplotlib.pyplot" not in source and "import pyplot" not in source
    with pytest.raises(ValueError, match=r"\.png"):
        plot_pass_at_k({"x": {1: 0.5}}, tmp_path / "passk.pdf")
