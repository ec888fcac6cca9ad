"""Retain ratio and recovery: SCOPD Table 1 reproduced from its printed per-benchmark scores.

Data transcribed from the SCOPD paper (/work/shared/seeds/004_*.txt, "Table 1: Main results across
visual-token budgets", Qwen2.5-VL-7B-Instruct with VisionZip). Each row: the 13 benchmark scores in
the printed column order, then the printed Avg₁₃. Avg₁₃ is "the mean performance normalized to the
unpruned Vanilla model on each benchmark", i.e. ``retain_ratio(row, vanilla_100)``.
"""

import pytest

from sparsectx.eval.aggregate import recovery, retain_ratio, retain_ratios

BENCHMARKS = (
    "MME",
    "MMStar",
    "MathVista",
    "MathVerse",
    "MMMU-Pro",
    "Hallusion",
    "CVBench",
    "LogicVista",
    "BLINK",
    "VisOnlyQA",
    "HR4K",
    "MME-RW-Lite",
    "RealWorldQA",
)

# Budget (%), method, the 13 scores, Avg₁₃ -- copied row by row from the paper's text.
TABLE1_TEXT = """
100 Vanilla 2250.63 64.27 66.70 42.39 46.13 66.25 75.19 47.87 56.39 44.70 66.00 47.63 64.97 100.00
100 SFT     2380.54 64.93 65.30 35.41 46.82 64.35 75.73 43.18 55.18 42.43 69.62 52.01 67.58 99.17
100 EPIC    2315.82 65.40 65.60 36.42 48.09 65.09 77.00 49.22 54.87 42.87 68.62 50.96 66.93 100.30
100 GRPO    2262.94 64.47 67.10 42.39 46.18 66.25 75.23 48.55 56.65 43.91 67.62 49.30 67.06 100.84
100 SCOPD   2322.58 64.20 68.00 43.02 45.49 68.14 73.20 47.20 56.71 45.65 64.62 47.68 67.58 100.67
100 SCOPD+  2310.91 65.20 67.90 40.61 44.34 68.98 73.68 46.76 56.02 44.52 64.88 48.67 67.06 100.02
20  Vanilla 2106.54 60.27 61.60 37.56 43.82 61.51 73.12 40.72 52.03 42.35 66.50 43.77 62.61 93.42
20  SFT     2368.60 60.53 60.90 32.99 44.62 62.57 73.59 38.26 53.18 42.78 70.38 47.21 67.97 95.22
20  EPIC    2225.28 59.67 58.90 33.63 45.55 60.78 76.45 41.16 52.55 42.52 69.12 46.80 66.54 94.71
20  GRPO    2150.62 60.07 62.60 37.06 44.05 62.88 73.73 40.04 52.34 42.00 67.25 44.24 63.27 93.95
20  SCOPD   2270.21 62.87 65.00 39.47 44.97 63.83 73.51 41.83 54.60 42.70 65.88 46.01 65.88 96.80
20  SCOPD+  2235.58 61.80 64.50 42.01 43.99 65.72 72.68 43.18 55.13 42.35 66.25 46.33 65.88 97.25
10  Vanilla 2040.13 54.87 55.30 26.90 41.85 58.57 69.53 37.58 48.97 40.35 62.38 39.19 62.61 86.37
10  SFT     2277.41 55.67 54.90 25.63 40.75 56.78 72.86 34.68 50.45 40.96 68.00 44.66 66.80 88.82
10  EPIC    2149.19 55.87 50.40 24.37 41.45 55.73 72.69 32.66 50.13 40.26 65.75 43.67 64.44 86.45
10  GRPO    2061.41 55.47 54.90 25.38 41.91 58.99 70.08 34.00 48.71 40.09 64.25 39.40 61.18 85.73
10  SCOPD   2201.28 58.60 60.60 30.46 42.95 60.46 72.65 34.68 52.81 42.09 63.75 41.84 64.31 90.49
10  SCOPD+  2177.06 59.60 60.30 33.38 42.95 60.99 71.96 38.26 53.55 43.65 66.00 43.15 64.31 92.43
"""
TABLE1 = {
    (fields[1], int(fields[0])): [float(x) for x in fields[2:]]
    for fields in (line.split() for line in TABLE1_TEXT.strip().splitlines())
}


def _scores(key):
    return dict(zip(BENCHMARKS, TABLE1[key][:13], strict=True))


FULL = _scores(("Vanilla", 100))


@pytest.mark.parametrize("key", [("Vanilla", 10), ("SCOPD", 10), ("SCOPD+", 10), ("Vanilla", 20)], ids=lambda k: f"{k}")
def test_table1_headline_avg13(key):
    assert round(retain_ratio(_scores(key), FULL), 2) == TABLE1[key][13]


@pytest.mark.parametrize("key", list(TABLE1), ids=lambda k: f"{k}")
def test_table1_every_avg13(key):
    assert round(retain_ratio(_scores(key), FULL), 2) == pytest.approx(TABLE1[key][13], abs=1e-9)


SIX = ("MME", "MMStar", "BLINK", "VisOnlyQA", "MathVista", "RealWorldQA")
# SCOPD Table 2 (token selection) and Table 3 (pruners), both at 10%: six scores in SIX order, Avg₆.
TABLE23_TEXT = """
Dense-SCOPD       2201.28 58.60 52.81 42.09 60.60 64.31 94.44
Random            2141.89 59.87 52.97 41.74 58.50 63.66 93.56
Top-KL            2174.15 60.13 53.29 42.00 60.20 63.79 94.51
TIP               2179.75 60.40 53.76 42.26 59.20 62.22 94.21
Bottom-Sens.      2035.59 56.27 48.29 40.96 54.90 63.14 89.13
SCOPD+            2177.06 59.60 53.55 43.65 60.30 64.31 95.25
VisionZip-Vanilla 2040.13 54.87 48.97 40.35 55.30 62.61 88.74
DivPrune-Vanilla  1948.09 52.27 48.45 38.52 47.70 58.04 83.47
DivPrune-SCOPD+   2210.43 57.67 50.60 41.22 56.10 60.65 91.23
Random-Vanilla    1938.62 50.07 46.40 41.57 45.70 54.90 82.06
Random-SCOPD+     2207.62 54.87 49.87 41.57 53.80 56.86 88.85
FastV-Vanilla     1954.39 49.40 47.45 36.35 49.60 55.42 81.47
FastV-SCOPD+      2096.13 51.53 49.55 38.78 51.80 58.82 86.03
"""
TABLE23 = {f[0]: [float(x) for x in f[1:]] for f in (line.split() for line in TABLE23_TEXT.strip().splitlines())}
# Questions per benchmark where the count is public: MMStar 1500, BLINK val 1901, RealWorldQA 765.
ITEM_COUNTS = {"MMStar": 1500, "BLINK": 1901, "RealWorldQA": 765}


@pytest.mark.parametrize("name", list(TABLE23))
def test_table2_and_3_avg6_within_display_rounding(name):
    """Avg₆ uses the same normalisation (Vanilla at 100% from Table 1).

    From the printed two-decimal scores, 8 of 13 rows round to the printed Avg₆ and the other 5
    come out 0.005-0.008 low (Random, TIP, SCOPD+, VisionZip-Vanilla, FastV-SCOPD+). The gap is
    display rounding of the inputs: the authors averaged unrounded accuracies. Re-deriving the
    unrounded accuracy from the item count where it is public (``round(score * n / 100) / n``)
    reproduces all 13 rows exactly (next test).
    """
    scores = dict(zip(SIX, TABLE23[name][:6], strict=True))
    full6 = {b: FULL[b] for b in SIX}
    assert retain_ratio(scores, full6) == pytest.approx(TABLE23[name][6], abs=0.01)


def _unrounded(scores: dict[str, float]) -> dict[str, float]:
    return {
        b: round(v * ITEM_COUNTS[b] / 100) / ITEM_COUNTS[b] * 100 if b in ITEM_COUNTS else v for b, v in scores.items()
    }


@pytest.mark.parametrize("name", list(TABLE23))
def test_table2_and_3_avg6_exact_from_item_counts(name):
    scores = _unrounded(dict(zip(SIX, TABLE23[name][:6], strict=True)))
    full6 = _unrounded({b: FULL[b] for b in SIX})
    assert round(retain_ratio(scores, full6), 2) == TABLE23[name][6]


def test_retain_ratios_per_benchmark():
    got = retain_ratios({"a": 30.0, "b": 2000.0}, {"a": 60.0, "b": 1600.0})
    assert got == {"a": 50.0, "b": 125.0}
    assert retain_ratio({"a": 30.0, "b": 2000.0}, {"a": 60.0, "b": 1600.0}) == 87.5


def test_recovery_by_hand():
    full = {"a": 60.0, "b": 80.0}
    pruned = {"a": 40.0, "b": 70.0}
    method = {"a": 55.0, "b": 65.0}
    rec = recovery(method, pruned, full)
    assert rec.per_benchmark == {"a": 75.0, "b": -50.0}  # (55-40)/(60-40); (65-70)/(80-70)
    assert rec.mean == 12.5


def test_recovery_on_table1_mme():
    rec = recovery({"MME": 2177.06}, {"MME": 2040.13}, {"MME": 2250.63})
    assert rec.per_benchmark["MME"] == pytest.approx(100 * 136.93 / 210.50)


def test_mismatched_keys_name_the_benchmark():
    with pytest.raises(ValueError, match="MMStar"):
        retain_ratio({"MME": 1.0}, {"MME": 2.0, "MMStar": 3.0})
    with pytest.raises(ValueError, match="POPE"):
        recovery({"MME": 1.0, "POPE": 1.0}, {"MME": 0.5}, {"MME": 2.0})


def test_zero_denominators_name_the_benchmark():
    with pytest.raises(ValueError, match="'OCRBench'"):
        retain_ratio({"MME": 1.0, "OCRBench": 1.0}, {"MME": 2.0, "OCRBench": 0.0})
    with pytest.raises(ValueError, match="'MME'.*recovery is undefined"):
        recovery({"MME": 1.0}, {"MME": 2.0}, {"MME": 2.0})


def test_non_finite_and_empty_inputs():
    with pytest.raises(ValueError, match="finite"):
        retain_ratio({"MME": float("nan")}, {"MME": 2.0})
    with pytest.raises(ValueError, match="no benchmarks"):
        retain_ratio({}, {})
