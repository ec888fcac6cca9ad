"""Tables: bold/underline per budget block in Markdown, LaTeX and CSV; missing cells with reasons."""

import csv
import io

import pytest

from sparsectx.report.render import to_csv, to_latex, to_markdown
from sparsectx.report.tables import (
    MISSING,
    ResultRecord,
    build_table,
    check_versions,
    to_records,
)

FULL = {"MME": 2200.0, "MMStar": 60.0, "POPE": 80.0}
ROWS = {
    # (method, pruner, budget): scores in FULL's order; None = no score
    ("Vanilla", "none", 1.0): (2200.0, 60.0, 80.0),
    ("SCOPD", "none", 1.0): (2240.0, 59.0, 81.0),
    ("Vanilla", "vz", 0.2): (2000.0, 55.0, 78.0),
    ("SFT", "vz", 0.2): (2100.0, 54.0, 79.0),
    ("SCOPD", "vz", 0.2): (2050.0, 57.0, 77.0),
    ("Vanilla", "vz", 0.1): (1900.0, 50.0, 75.0),
    ("SCOPD", "vz", 0.1): (2000.0, 53.0, 76.0),
    ("SCOPD+", "vz", 0.1): (2000.0, None, 77.0),
}


def _records(rows=ROWS, version=1):
    out = []
    for (method, pruner, budget), scores in rows.items():
        for bench, score in zip(FULL, scores, strict=True):
            reason = "run crashed" if score is None else ""
            out.append(
                dict(
                    method=method,
                    pruner=pruner,
                    budget=budget,
                    benchmark=bench,
                    score=score,
                    scorer_version=version,
                    reason=reason,
                )
            )
    return out


@pytest.fixture
def table():
    return build_table(_records())


def _avg(scores):
    return sum(s / f for s, f in zip(scores, FULL.values(), strict=True)) / 3 * 100


def test_blocks_and_rows_in_paper_order(table):
    assert [b.budget for b in table.blocks] == [1.0, 0.2, 0.1]
    assert [(r.method, r.pruner) for r in table.blocks[0].rows] == [("Vanilla", "none"), ("SCOPD", "none")]
    assert all(block.rows[0].method == "Vanilla" for block in table.blocks)
    assert table.columns == ("MME", "MMStar", "POPE", "Avg")
    assert table.blocks[0].rows[0].cells[-1].text == "100.00"
    # Method order is first appearance (SCOPD appears at 100% before SFT does at 20%), Vanilla first.
    assert [r.method for r in table.blocks[1].rows] == ["Vanilla", "SCOPD", "SFT"]
    assert table.blocks[1].rows[2].cells[-1].value == pytest.approx(_avg(ROWS[("SFT", "vz", 0.2)]))


def _marks(table, budget):
    block = next(b for b in table.blocks if b.budget == budget)
    return {r.method: [c.mark for c in r.cells] for r in block.rows}


def test_marks_are_per_block(table):
    # 20%: MME SFT > SCOPD > Vanilla; MMStar SCOPD > Vanilla; POPE SFT > Vanilla.
    # Avg: SCOPD 94.81 > SFT 94.73 > Vanilla 93.36.
    assert _marks(table, 0.2) == {
        "Vanilla": ["", "second", "second", ""],
        "SFT": ["best", "", "best", "second"],
        "SCOPD": ["second", "best", "", "best"],
    }
    # 10%: MME tie between SCOPD and SCOPD+ (both bold, Vanilla underlined); MMStar and Avg of SCOPD+ missing.
    assert _marks(table, 0.1) == {
        "Vanilla": ["second", "second", "", "second"],
        "SCOPD": ["best", "best", "second", "best"],
        "SCOPD+": ["best", "", "best", ""],
    }
    # 100%: Avg SCOPD 100.47 > Vanilla 100.00.
    assert _marks(table, 1.0) == {
        "Vanilla": ["second", "best", "second", "second"],
        "SCOPD": ["best", "second", "best", "best"],
    }


def _line(text, method, budget_heading):
    section = text.split(budget_heading, 1)[1]
    return next(
        line for line in section.splitlines() if line.startswith(f"| {method} |") or line.startswith(f"{method} &")
    )


def test_markdown(table):
    md = to_markdown(table)
    assert md.splitlines()[0] == "| Method | Pruner | MME | MMStar | POPE | Avg |"
    sft = _line(md, "SFT", "Retain 20% visual tokens")
    assert sft.startswith("| SFT | vz | **2100.00** | 54.00 | **79.00** | <u>")
    scopd_plus = _line(md, "SCOPD+", "Retain 10% visual tokens")
    assert scopd_plus == f"| SCOPD+ | vz | **2000.00** | {MISSING}<sup>1</sup> | **77.00** | {MISSING}<sup>2</sup> |"
    assert "- <sup>1</sup> run crashed: SCOPD+ / vz / 10%: MMStar." in md
    assert "- <sup>2</sup> the average needs a score on every benchmark: SCOPD+ / vz / 10%: Avg." in md


def test_latex(table):
    tex = to_latex(table)
    assert tex.startswith("\\begin{tabular}{llrrrr}\n\\toprule\nMethod & Pruner & MME & MMStar & POPE & Avg \\\\")
    assert "\\multicolumn{6}{c}{\\textit{Retain 20\\% visual tokens}} \\\\" in tex
    sft = _line(tex, "SFT", "Retain 20\\% visual tokens")
    assert sft.startswith("SFT & vz & \\textbf{2100.00} & 54.00 & \\textbf{79.00} & \\underline{")
    vanilla = _line(tex, "Vanilla", "Retain 10\\% visual tokens")
    assert vanilla.startswith("Vanilla & vz & \\underline{1900.00} & \\underline{50.00} & 75.00 & ")
    scopd_plus = _line(tex, "SCOPD+", "Retain 10\\% visual tokens")
    assert "---\\textsuperscript{1}" in scopd_plus
    assert "\\textsuperscript{1} run crashed: SCOPD+ / vz / 10\\%: MMStar." in tex


def test_csv(table):
    rows = list(csv.DictReader(io.StringIO(to_csv(table))))
    assert list(rows[0]) == [
        "budget",
        "method",
        "pruner",
        "MME",
        "MMStar",
        "POPE",
        "Avg",
        "best",
        "second",
        "notes",
    ]
    assert [(r["budget"], r["method"]) for r in rows][:3] == [
        ("1", "Vanilla"),
        ("1", "SCOPD"),
        ("0.2", "Vanilla"),
    ]
    sft = next(r for r in rows if (r["budget"], r["method"]) == ("0.2", "SFT"))
    assert (sft["MME"], sft["best"], sft["second"]) == ("2100.00", "MME;POPE", "Avg")
    plus = next(r for r in rows if r["method"] == "SCOPD+")
    assert (plus["MMStar"], plus["Avg"]) == (MISSING, MISSING)
    assert plus["notes"] == "MMStar: run crashed; Avg: the average needs a score on every benchmark"
    assert plus["best"] == "MME;POPE"


def test_absent_record_is_shown_not_dropped():
    records = [r for r in _records() if not (r["method"] == "SFT" and r["benchmark"] == "POPE")]
    table = build_table(records)
    md = to_markdown(table)
    assert "no result record: SFT / vz / 20%: POPE." in md


def test_missing_reference_row_blanks_the_average_with_a_reason():
    records = [r for r in _records() if not (r["method"] == "Vanilla" and r["budget"] == 1.0)]
    md = to_markdown(build_table(records))
    assert "no full-context Vanilla row (budget 1.0) to normalise by" in md


def test_refuses_mixed_scorer_versions():
    records = _records()
    records[4] = {**records[4], "scorer_version": 2}
    with pytest.raises(ValueError, match=f"'{records[4]['benchmark']}' mixes scorer_version values \\[1, 2\\]"):
        build_table(records)


def test_refuses_mixed_extractor_versions():
    records = [{**r, "extractor_version": 1} for r in _records()]
    assert check_versions(to_records(records))["MME"] == (1, 1)
    records[0] = {**records[0], "extractor_version": None}
    with pytest.raises(ValueError, match="'MME' mixes extractor_version"):
        build_table(records)
    with pytest.raises(ValueError, match="must be an int"):
        build_table([{**records[1], "scorer_version": "1"}])


def test_refuses_duplicates_unknown_keys_and_unlisted_benchmarks():
    records = _records()
    with pytest.raises(ValueError, match="two results"):
        build_table([*records, records[0]])
    with pytest.raises(ValueError, match="unknown keys \\['seed'\\]"):
        build_table([{**records[0], "seed": 0}])
    with pytest.raises(ValueError, match="not in"):
        build_table(records, benchmarks=["MME", "MMStar"])
    with pytest.raises(ValueError, match="budget"):
        build_table([{**records[0], "budget": 0.0}])


def test_blocks_sorted_by_budget_whatever_the_record_order():
    table = build_table(list(reversed(_records())))
    assert [b.budget for b in table.blocks] == [1.0, 0.2, 0.1]
    assert all(block.rows[0].method == "Vanilla" for block in table.blocks)


def test_accepts_dataclass_records_and_method_order():
    recs = [ResultRecord(**r) for r in _records()]
    table = build_table(recs, methods=["SCOPD+", "SCOPD", "SFT"])
    assert [r.method for r in table.blocks[2].rows] == ["Vanilla", "SCOPD+", "SCOPD"]


def test_zero_full_context_score_blanks_the_average_with_a_reason():
    rows = {key: ((0.0 if key == ("Vanilla", "none", 1.0) else s[0]), *s[1:]) for key, s in ROWS.items()}
    md = to_markdown(build_table(_records(rows)))
    assert "retain ratio undefined: the full-context score is 0 on MME" in md
