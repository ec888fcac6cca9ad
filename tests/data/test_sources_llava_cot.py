"""The LLaVA-CoT builders (original tags and OpenMMReasoner's parquet) on files shaped like the downloads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from sparsectx.data.sources import build_training_set
from sparsectx.data.sources.rows import style_response
from sparsectx.data.tsv import read_tsv

from .source_fixtures import cot_response, png, recipe, write_llava_cot, write_openmmreasoner

KEY = "training_set.sources.llava_cot"


def cot_recipe(root: Path, out: Path, quota: int, *extra: str) -> list[str]:
    """Returns overrides pointing the llava_cot recipe at a fixture in ``root``."""
    return [
        f"{KEY}.files=[{root / 'train.jsonl'}]",
        f"{KEY}.image_root={root}",
        f"{KEY}.quota={quota}",
        f"training_set.out_path={out}",
        *extra,
    ]


def test_tags_map_to_think_and_answer() -> None:
    answer, trace = style_response(cot_response(3), "", "llava_cot_tags")  # type: ignore[misc]
    assert answer == "answer 3"
    assert trace == "<think>plan 3\n\nimage 3\n\nstep 3</think><answer>answer 3</answer>"


def test_builds_the_quota_readable_by_training(tmp_path: Path) -> None:
    write_llava_cot(tmp_path / "cot", 12)
    report = build_training_set(recipe("llava_cot", cot_recipe(tmp_path / "cot", tmp_path / "t.tsv", 7)))
    items, skips = read_tsv(tmp_path / "t.tsv")
    assert (len(items), skips, report.rows) == (7, [], 7)
    assert [item.index for item in items] == list(range(7))
    ids = [item.extra["source_id"] for item in items]
    assert len(set(ids)) == 7
    for item in items:
        i = int(item.extra["source_id"][1:])
        assert item.question == f"Question {i}?" and item.answer == f"answer {i}" and item.category == "llava_cot"
        assert item.image_bytes == png(i)  # the downloaded file's bytes, unchanged
        assert item.trace.startswith(f"<think>plan {i}") and item.trace.endswith(f"<answer>answer {i}</answer>")
    counts = json.loads((tmp_path / "t.report.json").read_text())["sources"]["llava_cot"]
    assert counts == {
        "quota": 7,
        "seed": 0,
        "rows_read": 12,
        "drawn": 7,
        "filtered": {},
        "dropped": {},
        "first_row_per_reason": {},
    }


def test_same_seed_same_bytes_other_seed_other_rows(tmp_path: Path) -> None:
    write_llava_cot(tmp_path / "cot", 12)
    paths = [tmp_path / f"{name}.tsv" for name in ("a", "b", "c")]
    for path, seed in zip(paths, (0, 0, 1), strict=True):
        build_training_set(recipe("llava_cot", cot_recipe(tmp_path / "cot", path, 7, f"{KEY}.seed={seed}")))
    assert paths[0].read_bytes() == paths[1].read_bytes()
    assert paths[0].read_bytes() != paths[2].read_bytes()


def test_missing_image_names_file_and_row(tmp_path: Path) -> None:
    jsonl = write_llava_cot(tmp_path / "cot", 12)
    for i in range(12):
        (tmp_path / "cot" / f"coco/train2017/{i:06d}.jpg").unlink()
    out = tmp_path / "t.tsv"
    with pytest.raises(ValueError, match=rf"{jsonl} line \d+: image missing: image file .* does not exist"):
        build_training_set(recipe("llava_cot", cot_recipe(tmp_path / "cot", out, 3, "training_set.skip_budget=0")))
    assert not out.exists() and not list(tmp_path.glob(".t.tsv*"))  # nothing half-written


def test_malformed_row_names_file_and_row(tmp_path: Path) -> None:
    jsonl = write_llava_cot(tmp_path / "cot", 6)
    lines = jsonl.read_text().splitlines()
    lines[3] = lines[3][:20]  # a cut-off line
    jsonl.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=rf"{jsonl} line 4: malformed row: unparseable JSON"):
        build_training_set(
            recipe("llava_cot", cot_recipe(tmp_path / "cot", tmp_path / "t.tsv", 3, "training_set.skip_budget=0"))
        )


def test_bad_rows_within_budget_are_counted_by_reason(tmp_path: Path) -> None:
    root = tmp_path / "cot"
    jsonl = write_llava_cot(root, 12)
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    rows[0]["conversations"][1]["value"] = "no tags at all"
    rows[1]["conversations"][0]["value"] = "<image>"  # nothing left of the question
    rows[2]["image"] = "../outside.png"
    rows[3].pop("image")  # a text-only row: filtered, not budgeted
    (root / rows[4]["image"]).write_bytes(b"not an image")
    (root / rows[5]["image"]).unlink()
    jsonl.write_text("".join(json.dumps(row) + "\n" for row in rows) + "[1, 2]\n")
    out = tmp_path / "t.tsv"
    cfg = recipe("llava_cot", cot_recipe(root, out, 6, "training_set.skip_budget=6"))
    report = build_training_set(cfg)
    counts = report.sources["llava_cot"]
    assert dict(counts.filtered) == {"no image": 1}
    # 6 usable rows for a quota of 6; seed 0's order visits the undecodable and the missing image before
    # its sixth good row (a draw stops at its quota, so another seed may leave one of them undrawn)
    assert dict(counts.skipped) == {
        "missing LLaVA-CoT tag": 1,
        "empty question": 1,
        "image path leaves image_root": 1,
        "malformed row": 1,
        "image does not decode": 1,
        "image missing": 1,
    }
    assert counts.rows == 13 and counts.drawn == 6 and len(read_tsv(out)[0]) == 6
    assert counts.first["no image"] == f"{jsonl} line 4: the row has no image (a text-only row)"
    assert counts.first["malformed row"].startswith(f"{jsonl} line 13: not a JSON object")
    report = json.loads(out.with_suffix(".report.json").read_text())["sources"]["llava_cot"]
    assert report["first_row_per_reason"]["empty question"].startswith(f"{jsonl} line 2: ")
    assert {item.extra["source_id"] for item in read_tsv(out)[0]} == {f"r{i}" for i in range(6, 12)}
    with pytest.raises(ValueError, match=rf"{jsonl} line \d+: .* dropped row 6, over training_set.skip_budget=5"):
        build_training_set(recipe("llava_cot", cot_recipe(root, out, 6, "training_set.skip_budget=5")))


def test_undecodable_and_missing_images_drawn_are_replaced_and_counted(tmp_path: Path) -> None:
    root = tmp_path / "cot"
    write_llava_cot(root, 5)
    (root / "coco/train2017/000000.jpg").write_bytes(b"junk")
    (root / "coco/train2017/000001.jpg").unlink()
    report = build_training_set(
        recipe("llava_cot", cot_recipe(root, tmp_path / "t.tsv", 3, "training_set.skip_budget=2"))
    )
    counts = report.sources["llava_cot"]
    assert dict(counts.skipped) == {"image does not decode": 1, "image missing": 1} and counts.drawn == 3
    ids = {item.extra["source_id"] for item in read_tsv(tmp_path / "t.tsv")[0]}
    assert ids == {"r2", "r3", "r4"}


def test_too_few_usable_rows_is_an_error_naming_the_quota(tmp_path: Path) -> None:
    write_llava_cot(tmp_path / "cot", 4)
    with pytest.raises(ValueError, match=rf"{KEY}: 4 usable rows for quota 5"):
        build_training_set(recipe("llava_cot", cot_recipe(tmp_path / "cot", tmp_path / "t.tsv", 5)))


def test_missing_download_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=rf"{KEY}.files: .* names no file"):
        build_training_set(recipe("llava_cot", cot_recipe(tmp_path / "absent", tmp_path / "t.tsv", 1)))


def test_openmmreasoner_parquet_with_embedded_images(tmp_path: Path) -> None:
    parquet = write_openmmreasoner(tmp_path / "omr", 8)
    out = tmp_path / "t.tsv"
    cfg = recipe(
        "llava_cot_openmmreasoner",
        [f"{KEY}.files=[{parquet}]", f"{KEY}.quota=5", f"training_set.out_path={out}"],
    )
    build_training_set(cfg)
    items, skips = read_tsv(out)
    assert len(items) == 5 and not skips
    for item in items:
        i = int(item.extra["source_id"][1:])
        assert item.question == f"Solve {i}" and item.answer == str(i)
        assert item.trace == f"<think>work {i}</think><answer>{i}</answer>" and item.image_bytes == png(500 + i)


def test_cli_writes_the_recipe_and_its_resolved_config_beside_it(tmp_path: Path) -> None:
    write_llava_cot(tmp_path / "cot", 6)
    repo = Path(__file__).resolve().parents[2]
    args = ["data/sources=llava_cot", *cot_recipe(Path("cot"), Path("out/t.tsv"), 3)]
    env = {**os.environ, "PYTHONPATH": str(repo / "src")}
    done = subprocess.run(
        [sys.executable, str(repo / "src" / "build_data.py"), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert len(read_tsv(tmp_path / "out" / "t.tsv")[0]) == 3
    assert (tmp_path / "out" / "t.tsv.run" / ".hydra" / "config.yaml").is_file()
    assert not (tmp_path / "data").exists()  # neither the synthetic suite nor data/tiny/.hydra


def test_images_the_processor_cannot_take_well_are_counted_drops(tmp_path: Path) -> None:
    root = tmp_path / "cot"
    write_llava_cot(root, 5)
    (root / "coco/train2017/000002.jpg").write_bytes(png(2, side=20))  # below min_image_side=28
    Image.new("RGB", (6030, 30)).save(root / "coco/train2017/000003.jpg", format="PNG")  # 201:1
    # seed 1 draws rows 2, 3, 4 first (draw_order(5, 1) == [2, 3, 4, 0, 1]): both bad images are reached
    report = build_training_set(recipe("llava_cot", cot_recipe(root, tmp_path / "t.tsv", 3, f"{KEY}.seed=1")))
    counts = report.sources["llava_cot"]
    assert dict(counts.skipped) == {"image too small": 1, "image too elongated": 1}
    assert counts.first["image too small"].endswith("20x20 px, below min_image_side=28")
    assert counts.first["image too elongated"].endswith("6030x30 px, beyond max_aspect_ratio=200.0")
