"""Tiny random-weight video-capable families (the real HF classes) and items for the video tests.

Each family's processor folder holds the model's config.json, so ``load_processor`` picks the family's video
layout; the character tokenizer's chat template gains the hub templates' video part (GLM-4.6V's:
``<|begin_of_video|><|video|><|end_of_video|>``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from family_models import GLM_TEMPLATE, glm_processor_dir, tiny_glm46v
from omegaconf import OmegaConf
from qwen3_5_models import tiny_qwen3_5
from tiny_models import TEMPLATE, char_processor, noise_image, tiny_qwen2_5_vl, tiny_qwen3_vl

from sparsectx.data import load_suite_config
from sparsectx.data.video import Video, VideoSource, row_video
from sparsectx.data.video_family import load_video_family_config, video_items
from sparsectx.models import adapter_for
from sparsectx.models.adapter import VLMAdapter
from sparsectx.models.processor import ImageTextProcessor, load_processor
from sparsectx.prompting import PromptItem

CONF = Path(__file__).resolve().parents[2] / "conf"
VIDEO_TEMPLATE = TEMPLATE.replace(
    "{% elif c['type'] == 'text' %}",
    "{% elif c['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>{% elif c['type'] == 'text' %}",
)
GLM_VIDEO_TEMPLATE = GLM_TEMPLATE.replace(
    "{% elif c['type'] == 'text' %}",
    "{% elif c['type'] == 'video' %}<|begin_of_video|><|video|><|end_of_video|>{% elif c['type'] == 'text' %}",
)
BUILDERS = {
    "qwen2_5_vl": (tiny_qwen2_5_vl, 14),
    "qwen3_vl": (tiny_qwen3_vl, 16),
    "qwen3_5": (tiny_qwen3_5, 16),
    "glm46v": (tiny_glm46v, 14),
}
"""Video-capable family -> (builder, vision patch size)."""
SEPARATE_MODALITIES = ("glm46v",)
"""Families whose HF forward takes images or videos, not both (GLM-4.6V's placeholder masks overlap)."""
VIDEO_MAX_TOKENS = 48
"""Caps the test clips at 16 merged tokens per temporal patch (frames resized to 4 x 4 merged tokens)."""


@dataclass
class VideoFamily:
    """A tiny model under test: its family, adapter, processor (with the family's video layout), patch size."""

    name: str
    adapter: VLMAdapter
    processor: ImageTextProcessor
    patch: int


def video_family(family: str, tmp: Path, seed: int = 0, **kwargs: object) -> VideoFamily:
    """Returns the tiny ``family`` model (fp32, sdpa, CPU) with a video-templated processor saved in ``tmp``;
    ``kwargs`` go to the family's builder (e.g. ``layers``)."""
    build, patch = BUILDERS[family]
    tokenizer = glm_processor_dir(tmp) if family == "glm46v" else char_processor(patch, tmp).tokenizer
    model = build(tokenizer, seed=seed, **kwargs)
    model.config.save_pretrained(tmp)
    processor = load_processor(tmp)
    processor.tokenizer.chat_template = GLM_VIDEO_TEMPLATE if family == "glm46v" else VIDEO_TEMPLATE
    return VideoFamily(family, adapter_for(model, signal_chunk=8), processor, patch)


def synthetic_videos(count: int) -> list[tuple[str, Video]]:
    """Returns (question, clip) of the first ``count`` items of the shipped video family, cut to 6 frames
    (3 temporal patches; at most 2 one-frame blinks fit)."""
    suite = load_suite_config(OmegaConf.load(CONF / "data" / "tiny.yaml"))
    family = load_video_family_config(OmegaConf.load(CONF / "data" / "video" / "tiny_video.yaml"))
    family = replace(family, size=count, frames=6, blinks=[1, 2])
    source = VideoSource(Path("tiny_video.tsv"), Path("."), "", 6, VIDEO_MAX_TOKENS, family.fps)
    return [(item.question, row_video(item, source)) for item in video_items(suite, family)]


def item_batches(family: str, patch: int) -> list[list[PromptItem]]:
    """Returns the batches a family is checked on: one mixed batch (``video_and_multi_image_items``), or for
    ``SEPARATE_MODALITIES`` its video items and its image items apart."""
    items = video_and_multi_image_items(patch)
    if family not in SEPARATE_MODALITIES:
        return [items]
    videos = [item for item in items if item.videos and not item.images]
    return [videos, [item for item in items if not item.videos]]


def video_and_multi_image_items(patch: int) -> list[PromptItem]:
    """Returns a batch: two synthetic video items, a two-image item, and a video asked beside an image."""
    videos = synthetic_videos(3)
    two = [noise_image(patch * 4, patch * 6, 3), noise_image(patch * 6, patch * 4, 4)]
    return [
        PromptItem("video0", [], videos[0][0], "sys", "think", videos=[videos[0][1]]),
        PromptItem("two-images", two, "same?", "s", ""),
        PromptItem("video1", [], videos[1][0], "sys", "", videos=[videos[1][1]]),
        PromptItem(
            "video+image",
            [noise_image(patch * 4, patch * 4, 5)],
            videos[2][0],
            "s",
            "",
            videos=[videos[2][1]],
        ),
    ]
