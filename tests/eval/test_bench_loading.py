"""Reading a benchmark through its config's layout: where the file is found ($LMUData, data/, an explicit path),
several files as one benchmark, gold answers mapped to letters, rows refused before any generation, and the
prompt parts' placeholder rules."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from sparsectx.data.layout import render_question
from sparsectx.data.tsv import Item
from sparsectx.eval.config import compose_bench
from sparsectx.eval.protocol import bench_files, load_bench_items

from .vlmeval_cases import png_b64, write_tsv


def _mcq_rows(answers: list[str], options: bool = True) -> list[dict[str, str]]:
    """Returns MMStar-like rows (``index, question, A-D, answer, category, image``) with the given gold cells."""
    cells = {"A": "cat", "B": "dog", "C": "bird", "D": "fish"} if options else {}
    return [
        {
            "index": str(i),
            "question": f"Which animal {i}?",
            **cells,
            "answer": gold,
            "category": "x",
            "image": png_b64(i),
        }
        for i, gold in enumerate(answers)
    ]


def test_a_null_path_finds_the_file_in_lmudata_then_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lmu, work = tmp_path / "lmu", tmp_path / "work"
    (work / "data").mkdir(parents=True)
    lmu.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("LMUData", str(lmu))
    spec = compose_bench("mmstar")
    assert spec.path is None and spec.layout.files == ["MMStar.tsv"]
    with pytest.raises(FileNotFoundError) as missing:
        bench_files(spec)
    message = str(missing.value)
    assert str(lmu / "MMStar.tsv") in message and str(work / "data" / "MMStar.tsv") in message
    assert "$LMUData" in message and "bench.mmstar.path" in message
    write_tsv(work / "data" / "MMStar.tsv", _mcq_rows(["A"]))
    assert bench_files(spec) == [Path("data") / "MMStar.tsv"]
    write_tsv(lmu / "MMStar.tsv", _mcq_rows(["B"]))  # VLMEvalKit's folder comes first
    assert bench_files(spec) == [lmu / "MMStar.tsv"]


def test_gold_cells_become_letters_and_an_unmappable_one_names_its_row_column_and_value(tmp_path: Path) -> None:
    write_tsv(tmp_path / "MMStar.tsv", _mcq_rows(["B", "C. bird", "(D)", "dog", "A) cat", "a horse"]))
    spec = compose_bench("mmstar", [f"bench.mmstar.path={tmp_path / 'MMStar.tsv'}"])
    with pytest.raises(ValueError, match=r"row 5: column 'answer': gold 'a horse' is neither an option letter"):
        load_bench_items(spec, 0.0)
    items, skips, dropped = load_bench_items(spec, 0.5)
    assert [item.answer for item in items] == ["B", "C", "D", "B", "A"]
    assert [skip.index for skip in skips] == ["5"] and dropped == []


def test_a_multiple_choice_row_without_options_is_refused_before_generation(tmp_path: Path) -> None:
    rows = _mcq_rows(["A", "B"])
    rows[1] = {**rows[1], "A": "", "B": "", "C": "", "D": ""}  # options kept elsewhere than the A-D cells
    write_tsv(tmp_path / "MMStar.tsv", rows)
    spec = compose_bench("mmstar", [f"bench.mmstar.path={tmp_path / 'MMStar.tsv'}"])
    with pytest.raises(
        ValueError,
        match=r"row 1: no options: scorer 'mcq_vlmeval' reads an option letter.*"
        r"bench\.mmstar\.layout\.options",
    ):
        load_bench_items(spec, 0.0)


def test_rows_vlmeval_drops_are_counted_apart_from_skips(tmp_path: Path) -> None:
    rows = _mcq_rows(["A", "B", "C"])
    rows[1]["image"] = ""  # no image: ImageBaseDataset(skip_noimg=True) drops it
    write_tsv(tmp_path / "MMStar.tsv", rows)
    items, skips, dropped = load_bench_items(compose_bench("mmstar", [f"bench.mmstar.path={tmp_path}"]), 0.0)
    assert [item.index for item in items] == [0, 2] and skips == [] and [d.index for d in dropped] == ["1"]


def test_several_files_join_as_vlmeval_concatenates_them(tmp_path: Path) -> None:
    first, second = _mcq_rows(["A", "B"]), _mcq_rows(["C", "D"])
    second[1]["image"] = "0"  # a shared-image reference resolves within its own file
    write_tsv(tmp_path / "part_a.tsv", first)
    write_tsv(tmp_path / "part_b.tsv", second)
    overrides = [f"bench.mmstar.path={tmp_path}", "bench.mmstar.layout.files=[part_a.tsv,part_b.tsv]"]
    items = load_bench_items(compose_bench("mmstar", overrides), 0.0).items
    assert [item.index for item in items] == [0, 1, 2, 3]
    assert [(item.extra["SUB_DATASET"], item.extra["original_index"]) for item in items] == [
        ("part_a", "0"),
        ("part_a", "1"),
        ("part_b", "0"),
        ("part_b", "1"),
    ]
    assert items[3].image_bytes == items[2].image_bytes and items[3].answer == "D"


def test_a_part_naming_an_empty_field_is_left_out_and_inserted_text_is_never_expanded() -> None:
    parts = compose_bench("mmbench_en").layout.prompt
    item = Item(7, b"", "Which {hint}?", {"A": "{question}", "B": "b"}, "A", "", "", "", "", "", {"hint": "nan"})
    text = render_question(item, parts, "unused")
    assert text == (
        "Question: Which {hint}?\nOptions:\nA. {question}\nB. b\nPlease select the correct answer from the options "
        "above. \n"
    )
    hinted = render_question(replace(item, extra={"hint": "A hint."}), parts, "unused")
    assert hinted.startswith("Hint: A hint.\nQuestion: ")
