"""Every scorer is registered with an int version, and that version travels with its metrics."""

import pytest

from sparsectx.eval.scorers import (
    SCORERS,
    ScoredItem,
    exact,
    hallusionbench,
    mcq,
    mmbench,
    mme,
    ocrbench,
    pope,
    score_items,
    vqa,
    yes_no,
)

EXPECTED = {
    "exact_match": exact.VERSION_EXACT,
    "exact_match_vlmeval": exact.VERSION_EXACT_VLMEVAL,
    "mcq": mcq.VERSION,
    "mcq_vlmeval": mcq.VERSION_VLMEVAL,
    "hallusionbench": hallusionbench.VERSION,
    "hrbench": 1,
    "cvbench": 1,
    "mmmu_vlmeval": 1,
    "mme_realworld": 1,
    "logicvista": 1,
    "mathvista": 1,
    "mvbench": 1,
    "mlvu": 1,
    "videomme": 1,
    "video_tt": 1,
    "tempcompass_mcq": 1,
    "mmbench_circular": mmbench.VERSION,
    "mme": mme.VERSION,
    "number_match": exact.VERSION_NUMBER,
    "ocrbench": ocrbench.VERSION,
    "pope": pope.VERSION,
    "vqa_soft": vqa.VERSION,
    "yes_no": yes_no.VERSION,
}


def test_registered_scorers_and_versions():
    assert SCORERS.names() == sorted(EXPECTED)
    for name, version in EXPECTED.items():
        scorer = SCORERS.get(name)
        assert scorer.name == name
        assert type(scorer.version) is int and scorer.version >= 1
        assert scorer.version == version


def test_score_report_carries_name_and_version():
    report = score_items("yes_no", [ScoredItem(id="1", prediction="yes", reference="yes")])
    assert (report.scorer, report.scorer_version, report.metrics["score"]) == (
        "yes_no",
        yes_no.VERSION,
        100.0,
    )


def test_unknown_scorer_suggests_close_names():
    with pytest.raises(KeyError, match="Did you mean 'mme'"):
        score_items("mmee", [])


def test_empty_and_duplicate_items_are_errors():
    with pytest.raises(ValueError, match="no items"):
        score_items("exact_match", [])
    item = ScoredItem(id="1", prediction="a", reference="a")
    with pytest.raises(ValueError, match="occurs twice"):
        score_items("exact_match", [item, item])
