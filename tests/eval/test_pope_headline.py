"""POPE's headline: LT-OPD's macro accuracy (seed 000, App. D.1), as conf/bench/pope.yaml sets it; VLMEvalKit's
pooled F1 as the other named choice, and no silent default.

Macro accuracy is checked on a file in VLMEvalKit's POPE.tsv layout (comma-joined categories exploded as
``POPE_rating`` explodes them) against a brute-force reference written here, through the benchmark config as
``evaluate.py`` scores it; a headline name the scorer does not report is a config error naming the choices.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest

from sparsectx.eval.config import bench_spec_from, compose_bench
from sparsectx.eval.protocol import load_bench_items, sample_id, scored_item
from sparsectx.eval.scorers import SCORERS, ScoredItem, score_items
from sparsectx.eval.vlmeval_bridge import _compare

from .test_scorer_vlmeval_rules import ref_pope_rating, ref_yorn_extraction
from .vlmeval_cases import pope_rows, write_tsv

SUBSETS = ("adversarial", "popular", "random")


def brute_macro_accuracy(rows: list[dict[str, str]], predictions: list[str | None]) -> float:
    """Returns the mean over the three subsets of the percent of that subset's rows whose reading (VLMEvalKit's
    ``YOrN_Extraction``, an extraction miss read as ``Unknown``) equals the answer; a row counts in every subset
    its comma-joined category names."""
    accs = []
    for subset in SUBSETS:
        hits = [
            ref_yorn_extraction(pred or "") == row["answer"]
            for row, pred in zip(rows, predictions, strict=True)
            if subset in row["category"].split(",")
        ]
        accs.append(100.0 * sum(hits) / len(hits))
    return sum(accs) / len(accs)


def pope_file() -> tuple[list[dict[str, str]], list[str | None]]:
    """Returns the POPE.tsv-layout rows of ``vlmeval_cases`` with row 0 (``adversarial``, gold No) answered "No":
    its subsets then differ in size and accuracy, so the macro and pooled accuracies differ."""
    rows, predictions = pope_rows()
    return rows, ["No", *predictions[1:]]


def _scored(tmp_path: Path, overrides: tuple[str, ...] = ()) -> tuple[str | None, dict[str, float]]:
    """Returns the headline and metrics of the POPE.tsv-layout fixture scored through conf/bench/pope.yaml."""
    rows, predictions = pope_file()
    data = write_tsv(tmp_path / "POPE.tsv", rows)
    spec = compose_bench("pope", [f"bench.pope.path={data}", *overrides])
    items = load_bench_items(spec, 0.0).items
    answers = dict(zip((sample_id(item) for item in items), predictions, strict=True))
    scored = [scored_item(item, spec, answers[sample_id(item)]) for item in items]
    return spec.headline, score_items(spec.scorer, scored, spec.headline).metrics


def test_pope_config_headline_is_macro_accuracy_over_exploded_subsets(tmp_path: Path) -> None:
    rows, predictions = pope_file()
    assert any("," in row["category"] for row in rows)  # the fixture has shared questions to explode
    headline, metrics = _scored(tmp_path)
    want = brute_macro_accuracy(rows, predictions)
    assert headline == "macro_accuracy"
    assert metrics["score"] == pytest.approx(want) and metrics["macro_accuracy"] == metrics["score"]
    # VLMEvalKit's own per-split accuracies give the same mean; the pooled F1 stays in the metrics
    ref = ref_pope_rating([dict(r, prediction=p) for r, p in zip(rows, predictions, strict=True)])
    assert want == pytest.approx(sum(ref[s]["acc"] for s in SUBSETS) / 3)
    assert metrics["f1"] == pytest.approx(ref["Overall"]["Overall"])
    # the three figures differ on this fixture, so a wrong one in "score" would show
    assert len({round(metrics[k], 6) for k in ("score", "f1", "acc")}) == 3


def test_f1_headline_is_the_named_other_choice(tmp_path: Path) -> None:
    headline, metrics = _scored(tmp_path, ("bench.pope.headline=f1",))
    assert headline == "f1" and metrics["score"] == metrics["f1"]
    assert metrics["macro_accuracy"] == pytest.approx(brute_macro_accuracy(*pope_file()))


@pytest.mark.parametrize("value", ["accuracy", "null"])
def test_unknown_or_missing_headline_is_a_config_error_naming_the_choices(value: str) -> None:
    with pytest.raises(ValueError, match=r"bench\.pope\.headline=.*\['macro_accuracy', 'f1'\]"):
        compose_bench("pope", [f"bench.pope.headline={value}"])


def test_a_headline_on_a_single_headline_scorer_is_a_config_error() -> None:
    with pytest.raises(ValueError, match=r"bench\.mme\.headline='f1': scorer 'mme' has a single headline"):
        compose_bench("mme", ["+bench.mme.headline=f1"])


def test_scoring_pope_without_a_headline_is_refused() -> None:
    items = [ScoredItem(id="1", prediction="yes", reference="yes", subset="random")]
    with pytest.raises(ValueError, match=r"none is the default.*\['macro_accuracy', 'f1'\]"):
        score_items("pope", items)
    with pytest.raises(ValueError, match="several headlines"):
        SCORERS.get("pope")(items)


def test_a_recorded_spec_reads_back_its_headline() -> None:
    """The report and the judge rebuild the spec from a result's recorded config: the headline comes with it."""
    recorded = asdict(compose_bench("pope", ["bench.pope.headline=f1"]))
    assert bench_spec_from(recorded).headline == "f1"


def test_vlmeval_bridge_reads_the_results_headline_off_vlmevalkits_table() -> None:
    """``score_source=vlmeval`` tables show VLMEvalKit's figure for the result's headline: its split accuracies'
    mean for macro accuracy, its Overall F1 for f1; each compared with the project's same metric."""
    rows, predictions = pope_file()
    ref = ref_pope_rating([dict(r, prediction=p) for r, p in zip(rows, predictions, strict=True)])
    table = {f"{split}/{column}": value for split, values in ref.items() for column, value in values.items()}
    macro = sum(ref[s]["acc"] for s in SUBSETS) / 3
    project = {"macro_accuracy": macro, "f1": ref["Overall"]["Overall"]}
    block = _compare("pope", "macro_accuracy", table, project)
    assert block["score"] == pytest.approx(macro) and block["project_key"] == "macro_accuracy" and block["agrees"]
    block = _compare("pope", "f1", table, project)
    assert block["score"] == pytest.approx(ref["Overall"]["Overall"]) and block["agrees"]
    assert block["score"] != pytest.approx(macro)
