"""LT-14K's mixture builder on four small downloads (JSON array, JSON, parquet, JSONL), shrunk to 5 batches of 8."""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from sparsectx.data.build import load_build_config, run
from sparsectx.data.sources import build_training_set
from sparsectx.data.tsv import read_tsv

from .source_fixtures import (
    CONF_DIR,
    png,
    recipe,
    write_llava_665k,
    write_onethinker,
    write_pixmo,
    write_vision_opd,
)

S = "training_set.sources"
QUOTAS = {"llava_instruct_665k": 15, "onethinker": 10, "pixmo": 10, "vision_opd": 5}  # 40 = 5 batches of 8
PER_BATCH = {"llava_instruct_665k": 3, "onethinker": 2, "pixmo": 2, "vision_opd": 1}


@pytest.fixture
def downloads(tmp_path: Path) -> list[str]:
    """Returns overrides that point the lt_14k recipe at small downloads and shrink it to 5 x 8."""
    llava = write_llava_665k(tmp_path / "llava", 30, text_only=5)
    write_onethinker(tmp_path / "onethinker", 20, videos=4)  # read through a glob below
    pixmo = write_pixmo(tmp_path / "pixmo", 16)
    vision = write_vision_opd(tmp_path / "vopd", 10)
    return [
        "training_set.batch_size=8",
        "training_set.num_batches=5",
        f"{S}.llava_instruct_665k.files=[{llava}]",
        f"{S}.llava_instruct_665k.image_root={tmp_path / 'llava' / 'images'}",
        f"{S}.onethinker.files=[{tmp_path / 'onethinker'}/*.json]",
        f"{S}.onethinker.image_root={tmp_path / 'onethinker'}",
        f"{S}.pixmo.files=[{pixmo}]",
        f"{S}.pixmo.image_root={tmp_path / 'pixmo' / 'images'}",
        f"{S}.vision_opd.files=[{vision}]",
        f"{S}.vision_opd.image_root={tmp_path / 'vopd'}",
        *(f"{S}.{name}.quota={quota}" for name, quota in QUOTAS.items()),
    ]


def build(overrides: list[str], out: Path, *extra: str):
    """Returns the report of the lt_14k recipe written to ``out``."""
    return build_training_set(recipe("lt_14k", [*overrides, f"training_set.out_path={out}", *extra]))


def test_quotas_batches_and_rows_as_training_reads_them(downloads: list[str], tmp_path: Path) -> None:
    report = build(downloads, tmp_path / "lt.tsv")
    items, skips = read_tsv(tmp_path / "lt.tsv")
    assert not skips and len(items) == report.rows == 40
    assert Counter(item.category for item in items) == Counter(QUOTAS)
    for batch in range(5):
        rows = [item for item in items if item.extra["batch"] == str(batch)]
        assert [int(item.index) for item in rows] == list(range(8 * batch, 8 * batch + 8))
        assert Counter(item.category for item in rows) == Counter(PER_BATCH)
    by_source = {name: [item for item in items if item.category == name] for name in QUOTAS}
    for item in by_source["llava_instruct_665k"]:
        i = int(item.extra["source_id"][1:])
        assert (item.question, item.answer, item.trace, item.image_bytes) == (
            f"What is {i}?",
            f"It is {i}.",
            "",
            png(100 + i),
        )
    for item in by_source["onethinker"]:
        i = int(item.extra["source_id"])
        assert item.answer == str(i) and item.trace == f"<think>look {i}</think><answer>{i}</answer>"
        assert item.image_bytes == png(200 + i)
    pixmo_index = {hashlib.sha256(png(300 + i)).hexdigest(): i for i in range(16)}
    for item in by_source["pixmo"]:
        i = pixmo_index[item.extra["source_id"]]
        assert (item.question, item.answer, item.image_bytes) == (f"Ask {i}", f"Reply {i}", png(300 + i))
    assert {item.question for item in by_source["vision_opd"]} <= {f"Q{i}" for i in range(10)}
    counts = report.sources
    assert dict(counts["llava_instruct_665k"].filtered) == {"no image": 5}
    assert dict(counts["onethinker"].filtered) == {"data_type is not image": 4}
    assert all(not c.skipped for c in counts.values())


def test_same_seeds_same_bytes_and_each_seed_moves_only_its_sources(downloads: list[str], tmp_path: Path) -> None:
    first, again = tmp_path / "a.tsv", tmp_path / "b.tsv"
    build(downloads, first)
    build(downloads, again)
    assert first.read_bytes() == again.read_bytes()
    moved = tmp_path / "c.tsv"
    build(downloads, moved, f"{S}.vision_opd.seed=1")
    assert moved.read_bytes() != first.read_bytes()
    old, new = read_tsv(first)[0], read_tsv(moved)[0]
    for a, b in zip(old, new, strict=True):
        assert a.category == b.category  # the slots do not depend on the seeds
        if a.category != "vision_opd":
            assert a.extra["source_id"] == b.extra["source_id"]
    assert [a.extra["source_id"] for a in old if a.category == "vision_opd"] != [
        b.extra["source_id"] for b in new if b.category == "vision_opd"
    ]


def pixmo_image(tmp_path: Path, row: int) -> Path:
    """Returns the fixture's PixMo image file of parquet row ``row``."""
    return tmp_path / "pixmo" / "images" / hashlib.sha256(png(300 + row)).hexdigest()


def test_missing_parquet_image_names_the_parquet_file_and_row(downloads: list[str], tmp_path: Path) -> None:
    for row in range(16):
        pixmo_image(tmp_path, row).unlink()
    parquet = tmp_path / "pixmo" / "train-00000-of-00001.parquet"
    with pytest.raises(ValueError, match=rf"{parquet} row \d+: image missing: image file .* does not exist"):
        build(downloads, tmp_path / "lt.tsv", "training_set.skip_budget=0")


def test_a_fetched_image_that_is_not_the_annotated_one_is_dropped(downloads: list[str], tmp_path: Path) -> None:
    for row in range(16):  # the URLs now serve other pictures: every hash differs
        pixmo_image(tmp_path, row).write_bytes(png(900 + row))
    parquet = tmp_path / "pixmo" / "train-00000-of-00001.parquet"
    with pytest.raises(ValueError, match=rf"{parquet} row \d+: image sha256 mismatch: .* is not the annotated image"):
        build(downloads, tmp_path / "lt.tsv", "training_set.skip_budget=0")
    for row in range(16):
        pixmo_image(tmp_path, row).write_bytes(png(300 + row if row >= 6 else 900 + row))
    # 10 of 16 rows still match, the quota is 10: under seed 20260824 the draw visits all six others
    # before its tenth match (it stops at its quota, so another seed may leave some undrawn)
    report = build(downloads, tmp_path / "lt.tsv", "training_set.skip_budget=6")
    assert dict(report.sources["pixmo"].skipped) == {"image sha256 mismatch": 6}
    assert report.sources["pixmo"].drawn == 10


def test_run_writes_the_recipe_and_not_the_suite(downloads: list[str], tmp_path: Path) -> None:
    out = tmp_path / "lt.tsv"
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose(
            "build_data",
            overrides=[
                "data/sources=lt_14k",
                *downloads,
                f"training_set.out_path={out}",
                f"data.out_dir={tmp_path / 's'}",
            ],
        )
    assert run(cfg) is None  # the recipe sets write_suite=false
    assert len(read_tsv(out)[0]) == 40 and out.with_suffix(".report.json").is_file()
    assert not (tmp_path / "s").exists()


def test_quotas_must_fill_the_batches(downloads: list[str]) -> None:
    with pytest.raises(ValueError, match=r"the quotas sum to 41, but batch_size=8 x num_batches=5 = 40"):
        recipe("lt_14k", [*downloads, f"{S}.vision_opd.quota=6"])


@pytest.mark.parametrize("name", sorted(path.stem for path in (CONF_DIR / "data" / "sources").glob("*.yaml")))
def test_every_shipped_recipe_composes_and_checks(name: str) -> None:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = load_build_config(compose("build_data", overrides=[f"data/sources={name}"]))
    assert cfg.training_set is not None and cfg.training_set.name == name and not cfg.write_suite


def test_the_paper_geometry_of_lt14k() -> None:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = load_build_config(compose("build_data", overrides=["data/sources=lt_14k"])).training_set
    assert cfg is not None and (cfg.batch_size, cfg.num_batches) == (80, 175)
    assert sum(source.quota for source in cfg.sources.values()) == 14000
    assert {name: source.seed for name, source in cfg.sources.items()} == {
        "llava_instruct_665k": 20260824,
        "onethinker": 20260824,
        "pixmo": 20260824,
        "vision_opd": 20260830,
    }


def test_a_json_source_that_is_not_one_array_names_its_file(downloads: list[str], tmp_path: Path) -> None:
    llava = tmp_path / "llava" / "llava_v1_5_mix665k.json"
    llava.write_text(llava.read_text()[:-40])  # a truncated download
    with pytest.raises(ValueError, match=rf"{llava}: not valid JSON .* the whole file is unusable"):
        build(downloads, tmp_path / "lt.tsv")
