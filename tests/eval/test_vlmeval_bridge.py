"""Scoring a results leaf through VLMEvalKit itself (``sparsectx.eval.vlmeval_bridge``).

In VLMEvalKit's environment (``make vlmeval-env``; skipped with that message when absent): VLMEvalKit's own
``evaluate`` on the prediction file the bridge writes gives every figure the project's scorers gave the
same predictions (POPE, MME, HallusionBench, MMBench circular, OCRBench, HR-Bench, MMMU; hand-made files
in VLMEvalKit's layouts, answers on the rules' edge cases). Without it: the bad inputs (a missing column,
an unknown POPE category, a changed benchmark file, a missing or broken environment) raise naming the
file, column or command, and leave the result JSON as it was.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from sparsectx.eval.scorers import SCORERS
from sparsectx.eval.vlmeval_bridge import (
    BridgeConfig,
    check_columns,
    flatten,
    read_rows,
    score_with_vlmeval,
)

from .vlmeval_cases import CASES, make_leaf, require_vlmeval_env, write_tsv


def _leaf(tmp_path: Path, bench: str) -> Path:
    rows, predictions = CASES[bench][-1]()
    return make_leaf(tmp_path, bench, rows, predictions)


# --- pure parts ------------------------------------------------------------------------------------------


def test_flatten_reads_split_tables_one_row_tables_and_nested_dicts() -> None:
    table = {
        "type": "table",
        "columns": ["split", "Overall", "acc"],
        "rows": [["Overall", 50.0, 1], ["a", 2, 3]],
    }
    assert flatten(table) == {"Overall/Overall": 50.0, "Overall/acc": 1.0, "a/Overall": 2.0, "a/acc": 3.0}
    one_row = {"type": "table", "columns": ["perception", "OCR"], "rows": [[700.5, 150]]}
    assert flatten(one_row) == {"perception": 700.5, "OCR": 150.0}
    nested = {
        "type": "dict",
        "value": {"Final Score": {"sum": 6, "count": 12}, "Norm": {"sum": 0.6, "count": None}},
    }
    assert flatten(nested) == {"Final Score/sum": 6.0, "Final Score/count": 12.0, "Norm/sum": 0.6}


def test_video_ratings_flatten_by_position_and_give_their_headlines() -> None:
    mvbench = {"type": "dict", "value": {"t1": [3, 4, "75.00%"], "overall": [3, 8, "37.50%"]}}
    assert flatten(mvbench) == {"t1/0": 3.0, "t1/1": 4.0, "overall/0": 3.0, "overall/1": 8.0}
    assert SCORERS.get("mvbench").vlmeval.headline(flatten(mvbench)) == 37.5
    mlvu = {"type": "dict", "value": {"plotQA": [1, 4], "needle": [2, 2]}}
    assert SCORERS.get("mlvu").vlmeval.headline(flatten(mlvu)) == 50.0
    assert SCORERS.get("tempcompass_mcq").vlmeval.headline(
        flatten({"type": "dict", "value": {"speed. multi-choice": [1, 3]}})
    )
    with pytest.raises(KeyError):
        SCORERS.get("mlvu").vlmeval.headline({})
    assert SCORERS.get("mme_realworld").vlmeval.headline(flatten({"type": "dict", "value": {"Overall": 0.25}})) == 25.0


def test_missing_column_names_the_file_and_the_column(tmp_path: Path) -> None:
    rows, _ = CASES["mme"][-1]()
    data = write_tsv(tmp_path / "MME.tsv", [{k: v for k, v in row.items() if k != "image_path"} for row in rows])
    header, by_index = read_rows(data)
    with pytest.raises(ValueError, match=r"MME\.tsv: no column 'image_path'.*scorer 'mme'"):
        check_columns(data, header, "mme", by_index)


def test_unknown_pope_category_names_the_row_and_the_column(tmp_path: Path) -> None:
    rows, _ = CASES["pope"][-1]()
    rows[3]["category"] = "popular,hard"
    data = write_tsv(tmp_path / "POPE.tsv", rows)
    header, by_index = read_rows(data)
    with pytest.raises(ValueError, match=r"POPE\.tsv: row index 3 has category 'popular,hard' \(column 'category'\)"):
        check_columns(data, header, "pope", by_index)


def test_lower_case_yes_no_answers_are_refused(tmp_path: Path) -> None:
    """The synthetic files spell yes/no in lower case: VLMEvalKit would read every such row as wrong."""
    rows, _ = CASES["pope"][-1]()
    rows[2]["answer"] = "yes"
    data = write_tsv(tmp_path / "POPE.tsv", rows)
    header, by_index = read_rows(data)
    with pytest.raises(ValueError, match=r"row index 2 has answer 'yes' \(column 'answer'\)"):
        check_columns(data, header, "pope", by_index)


def test_hallusionbench_index_without_ids_is_refused(tmp_path: Path) -> None:
    data = write_tsv(
        tmp_path / "HB.tsv",
        [{"index": "7", "question": "q", "answer": "Yes", "category": "VD", "l2-category": "chart"}],
    )
    header, rows = read_rows(data)
    with pytest.raises(ValueError, match=r"index '7' \(column 'index'\)"):
        check_columns(data, header, "hallusionbench", rows)


def test_missing_environment_names_the_make_target_and_writes_nothing(tmp_path: Path) -> None:
    out = _leaf(tmp_path, "pope")
    before = out.read_bytes()
    with pytest.raises(FileNotFoundError, match="make vlmeval-env"):
        score_with_vlmeval(BridgeConfig(result=str(out), env=str(tmp_path / "no-env")))
    assert out.read_bytes() == before


def test_broken_environment_names_the_make_target_and_writes_nothing(tmp_path: Path) -> None:
    """An environment whose python cannot import vlmeval (here: the project's own, which lacks it)."""
    if os.system(f"{sys.executable} -c 'import vlmeval' >/dev/null 2>&1") == 0:
        pytest.skip("this python imports vlmeval; the broken-environment case needs one that does not")
    out = _leaf(tmp_path, "pope")
    env = tmp_path / "broken-env"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").symlink_to(sys.executable)
    before = out.read_bytes()
    with pytest.raises(RuntimeError, match=r"environment is broken \(import vlmeval failed.*make vlmeval-env"):
        score_with_vlmeval(BridgeConfig(result=str(out), env=str(env)))
    assert out.read_bytes() == before


def test_changed_benchmark_file_is_refused(tmp_path: Path) -> None:
    out = _leaf(tmp_path, "pope")
    data = tmp_path / "POPE.tsv"
    data.write_text(data.read_text() + data.read_text().splitlines()[1].replace("0\t", "99\t", 1) + "\n")
    with pytest.raises(ValueError, match=r"POPE\.tsv changed since .*rerun evaluate\.py"):
        score_with_vlmeval(BridgeConfig(result=str(out), env=str(tmp_path)))


def test_bad_config_values_are_refused() -> None:
    with pytest.raises(ValueError, match="prediction='raw'"):
        BridgeConfig(result="x.json", prediction="raw")


# --- VLMEvalKit's own evaluate ---------------------------------------------------------------------------


def _pairs(bench: str, vl: dict[str, float], mine: dict[str, float]) -> list[tuple[str, float, float]]:
    """Returns (name, VLMEvalKit's figure, the project's) for every figure both report on ``bench``."""
    if bench == "pope":
        names = {"Overall": "f1", "acc": "acc", "precision": "precision", "recall": "recall"}
        return [
            (
                f"{split}/{theirs}",
                vl[f"{split}/{theirs}"],
                mine[ours if split == "Overall" else f"{split}/{ours}"],
            )
            for split in ("Overall", "adversarial", "popular", "random")
            for theirs, ours in names.items()
        ]
    if bench == "hallusionbench":
        return [
            (f"{split}/{m}", vl[f"{split}/{m}"], mine[m if split == "Overall" else f"{split}/{m}"])
            for split in ("Overall", "VD", "VS", "chart", "map")
            for m in ("aAcc", "fAcc", "qAcc")
        ]
    if bench == "mme":
        from .vlmeval_cases import MME_CATEGORIES

        return [(name, vl[name], mine[name]) for name in ("perception", "reasoning", *MME_CATEGORIES)]
    if bench == "mmbench_en":
        cats = ("identity", "count", "color")
        return [("dev/Overall", 100 * vl["dev/Overall"], mine["score"])] + [
            (c, 100 * vl[f"dev/{c}"], mine[f"category/{c}"]) for c in cats
        ]
    if bench == "hrbench4k":
        pairs = [("Average/all", 100 * vl["Average/all/accuracy"], mine["score"])]
        pairs += [(c, 100 * vl[f"Average/{c}/accuracy"], mine[f"category/{c}"]) for c in ("single", "cross")]
        return pairs + [(f"cycle {c}", 100 * vl[f"{c}/all/accuracy"], mine[f"cycle/{c}"]) for c in "123"]
    if bench == "mmmu":
        return [("validation/Overall", 100 * vl["validation/Overall"], mine["score"])] + [
            (c, 100 * vl[f"validation/{c}"], mine[f"category/{c}"]) for c in ("Art", "Math")
        ]
    from .vlmeval_cases import OCR_CATEGORIES

    return [("Final Score", vl["Final Score/sum"], mine["final_score"])] + [
        (c, vl[f"{c}/sum"], mine[f"category/{c}"]) for c in OCR_CATEGORIES
    ]


@pytest.mark.slow
@pytest.mark.parametrize("bench", sorted(CASES))
def test_vlmeval_evaluate_gives_the_project_scorers_figures(tmp_path: Path, bench: str) -> None:
    env = require_vlmeval_env()
    out = _leaf(tmp_path, bench)
    project = json.loads(out.read_text())["metrics"]
    block = score_with_vlmeval(BridgeConfig(result=str(out), env=str(env)))
    assert block["agrees"] is True and block["dataset"] == CASES[bench][0] and block["judge"] == "exact_matching"
    pairs = _pairs(bench, block["metrics"], project)
    assert [p for p in pairs if abs(p[1] - p[2]) > 1e-9] == []
    assert len({round(theirs, 6) for _, theirs, _ in pairs}) > 1  # the cases are not all one value
    written = json.loads(out.read_text())
    assert written["vlmeval"] == block and written["metrics"] == project  # beside, not instead
    assert (out.parent / f"{bench}.vlmeval" / "vlmeval").is_dir()  # VLMEvalKit's own files, for inspection


@pytest.mark.slow
def test_a_leaf_written_by_evaluate_scores_alike_in_vlmeval(tmp_path: Path) -> None:
    """The real path: ``runner.run`` on the shipped tiny model writes the leaf; the bridge scores it."""
    from dataclasses import replace

    from hydra import compose, initialize_config_dir

    from sparsectx.data import write_tsv as write_items
    from sparsectx.data.build import load_build_config
    from sparsectx.data.synthetic import generate_bench
    from sparsectx.eval.runner import run

    from .test_runner_support import CONF, compose_eval

    env = require_vlmeval_env()
    with initialize_config_dir(version_base=None, config_dir=str(CONF)):
        build = compose("build_data", overrides=[f"data.out_dir={tmp_path}", "processor.write=false"])
    items, _ = generate_bench(load_build_config(build).data, "syn_pope")
    data = tmp_path / "POPE.tsv"  # VLMEvalKit's layout: Yes/No answers, the subset in category
    write_items(data, [replace(it, answer=it.answer.strip().capitalize(), category=it.subset) for it in items[:18]])
    overrides = [
        "model=tiny",
        "pruner=visionzip",
        "budget=0.1",
        "bench=syn_pope",
        f"bench.syn_pope.path={data}",
        "bench.syn_pope.dataset_name=POPE",
        "bench.syn_pope.subset_field=category",
        "logger=none",
        f"results_root={tmp_path / 'results'}",
    ]
    (result,) = run(compose_eval(overrides))
    block = score_with_vlmeval(BridgeConfig(result=str(result), env=str(env)))
    assert block["agrees"] is True and block["n"] == 18 and block["dataset"] == "POPE"
    assert json.loads(result.read_text())["vlmeval"]["project_score"] == json.loads(result.read_text())["score"]
