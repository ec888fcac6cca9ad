"""The pretraining stream's clips are what evaluation asks: the same prompt ids, the same pixels, and the
positions of the model's own ``get_rope_index``; clips lead every batch; a continuation keeps its first
stage's record. References: the project's processor and prompt builder (``processor_inputs``) on the same
frames, and HF's Qwen2.5-VL ``get_rope_index``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from test_resume import ASSET, CONF, PROCESSOR_FILES, SMALL
from transformers import AutoTokenizer

from sparsectx.data.tsv import content_hash, frames_hash
from sparsectx.data.video_family import video_items
from sparsectx.models.processor import load_processor
from sparsectx.pretrain.patchify import patchify_clips
from sparsectx.pretrain.stream import PretrainStream, collate
from sparsectx.pretrain.train import benchmark_hashes, build_model, load_config, run, video_stream
from sparsectx.prompting import processor_inputs

VIDEO = ["video.frame_size=112", "video.size=12", "train.videos_per_batch=2", "init_from=null"]


def _compose(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("pretrain_tiny_video", overrides=[*SMALL, *VIDEO, *overrides])


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = tmp_path_factory.mktemp("processor")
    for name in PROCESSOR_FILES:
        shutil.copy(ASSET / name, folder / name)
    cfg = load_config(_compose(f"out_dir={folder}"))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = build_model(cfg, tokenizer)
    side = cfg.data.scene.image_size // (cfg.vision.patch_size * cfg.vision.spatial_merge_size)
    stream = PretrainStream(cfg.data, tokenizer, (1, side, side), benchmark_hashes(cfg), video_stream(cfg, model))
    return cfg, model, stream, load_processor(folder)


@torch.no_grad()
def test_a_clip_is_the_evaluation_prompt_with_get_rope_index_positions(setup) -> None:
    cfg, model, stream, processor = setup
    item = stream[0]
    prompt, trace = stream.clip_prompt(0)
    batch = processor_inputs(processor, [prompt])
    assert torch.equal(batch["input_ids"][0], item["ids"][: item["prompt_len"]])
    assert stream.tokenizer.decode(item["ids"][item["prompt_len"] :]) == trace + "<|im_end|>"

    mean, std = processor.image_processor.image_mean, processor.image_processor.image_std
    rows, grid = patchify_clips(item["clip"][None], mean, std, 14, 2, 2)
    assert torch.equal(grid[0], batch["video_grid_thw"][0])
    torch.testing.assert_close(rows, batch["pixel_values_videos"].float(), atol=1e-5, rtol=1e-5)

    ids = item["ids"][None]
    kinds = (ids == model.config.video_token_id).long() * 2
    want, _ = model.model.get_rope_index(
        ids,
        kinds,
        video_grid_thw=batch["video_grid_thw"],
        second_per_grid_ts=batch["second_per_grid_ts"],
        attention_mask=torch.ones_like(ids),
    )
    assert torch.equal(item["positions"], want[:, 0])
    temporal = item["positions"][0, ids[0] == model.config.video_token_id].unique()
    assert (temporal - temporal[0]).tolist() == [
        0,
        4,
        8,
        12,
    ]  # 4 temporal patches, 1 s x tokens_per_second apart


def test_clips_lead_every_batch_and_benchmark_clips_are_excluded(setup) -> None:
    cfg, _, stream, _ = setup
    items = [stream[n] for n in range(2 * cfg.train.batch_size)]
    assert ["clip" in it for it in items] == [True, True, False] * 2
    batch = collate(items[:3], pad_id=0)
    assert batch["clips"].shape[:2] == (2, cfg.video.frames) and batch["images"].shape[0] == 1
    assert {it.content_hash() for it in video_items(cfg.data, cfg.video)} <= stream.exclude


def test_a_clip_equal_to_a_benchmark_clip_is_redrawn(setup) -> None:
    _, _, stream, _ = setup
    prompt, _ = stream.clip_prompt(0)
    raw = prompt.question.split("\n")[0]
    blocked = PretrainStream(stream.suite, stream.tokenizer, stream.grid, set(), stream.video)
    blocked.exclude = {content_hash(frames_hash(list(prompt.videos[0].frames)), raw)}
    redrawn, _ = blocked.clip_prompt(0)
    assert redrawn.videos[0].frames != prompt.videos[0].frames


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["train.videos_per_batch=0"], r"train.videos_per_batch=0 with video=set"),
        (["train.videos_per_batch=9"], r"train.videos_per_batch=9 must lie in \[0, train.batch_size=3\]"),
        (
            ["video.frames=7", "video.blinks=[1,2]"],
            r"video.frames=7 must be a multiple of vision.temporal_patch_size=2",
        ),
    ],
)
def test_bad_video_settings_name_the_key(overrides, match) -> None:
    with pytest.raises(ValueError, match=match):
        load_config(_compose(*overrides))


@pytest.mark.slow
def test_a_continuation_trains_on_clips_and_keeps_the_first_stage_record(tmp_path: Path) -> None:
    first = tmp_path / "first"
    first.mkdir()
    for name in PROCESSOR_FILES:
        shutil.copy(ASSET / name, first / name)
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        base = compose(
            "pretrain_tiny", overrides=[*SMALL, f"out_dir={first}", f"state_dir={tmp_path / 's1'}", "train.steps=1"]
        )
    run(base, "stage one")
    second = tmp_path / "second"
    shutil.copytree(first, second)
    result = run(
        _compose(f"out_dir={second}", f"init_from={first}", f"state_dir={tmp_path / 's2'}", "train.steps=2"),
        "stage two",
    )
    assert result["done"] and all(torch.isfinite(torch.tensor(c["loss"])) for c in result["curve"])
    record = json.loads((second / "training_record.json").read_text())
    assert record["command"] == "stage two" and record["config"]["train"]["videos_per_batch"] == 2
    assert record["earlier_stage"] == json.loads((first / "training_record.json").read_text())


def test_the_shipped_video_model_continues_the_shipped_image_model() -> None:
    video = ASSET.parent / "tiny-vlm-video"
    record = json.loads((video / "training_record.json").read_text())
    assert record["earlier_stage"] == json.loads((ASSET / "training_record.json").read_text())
    assert record["complete"] and record["config"]["init_from"] == "src/sparsectx/assets/tiny-vlm"
    assert record["config"]["video"]["name"] == "tiny_video" and record["config"]["train"]["videos_per_batch"] > 0
    for name in PROCESSOR_FILES:  # one tokenizer and processor: the continuation changes weights only
        assert (video / name).read_bytes() == (ASSET / name).read_bytes(), name
    image, clips = (json.loads((d / "config.json").read_text()) for d in (ASSET, video))
    assert image == clips
    # the benchmark's clips and traces follow today's configs, as the shipped image model's suite does
    shipped = load_config(_shipped_config())
    assert record["config"]["video"] == OmegaConf.to_container(OmegaConf.structured(shipped.video))
    assert record["config"]["data"] == OmegaConf.to_container(OmegaConf.structured(shipped.data))


def _shipped_config():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("pretrain_tiny_video")
