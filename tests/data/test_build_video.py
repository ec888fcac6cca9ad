"""``python src/build_data.py data/video=tiny_video`` writes the synthetic video benchmark beside the suite."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from sparsectx.data import load_suite_config, read_tsv
from sparsectx.data.build import load_build_config, run
from sparsectx.data.video_family import build_video_bench, load_video_family_config

CONF = Path(__file__).resolve().parents[2] / "conf"


def _compose(*overrides: str):  # noqa: ANN202
    with initialize_config_dir(version_base=None, config_dir=str(CONF)):
        return compose("build_data", overrides=list(overrides))


def test_build_data_writes_the_video_family_as_the_family_builder_does(tmp_path: Path) -> None:
    out = tmp_path / "built"
    run(_compose("data/video=tiny_video", "video.size=12", "write_suite=false", f"data.out_dir={out}"))
    suite = load_suite_config(OmegaConf.load(CONF / "data" / "tiny.yaml"))
    family = load_video_family_config(OmegaConf.load(CONF / "data" / "video" / "tiny_video.yaml"))
    direct = build_video_bench(replace(suite, out_dir=str(tmp_path / "direct")), replace(family, size=12))
    assert (out / "tiny_video.tsv").read_bytes() == direct.read_bytes()
    items, skipped = read_tsv(out / "tiny_video.tsv")
    assert len(items) == 12 and not skipped
    assert sorted(p.name for p in out.iterdir()) == ["tiny_video.tsv"]  # write_suite=false: nothing else


def test_no_video_family_is_chosen_by_default() -> None:
    assert load_build_config(_compose()).video is None
