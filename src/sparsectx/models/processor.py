"""A Qwen-VL image+text processor composed from a checkpoint's tokenizer and image-processor files.

transformers 5.17's ``AutoProcessor`` for Qwen-VL insists on a torchvision video processor, and
PyPI's torchvision does not import beside the CPU torch build this project installs. The parts we
need do not depend on torchvision: the tokenizer (with its chat template), the PIL image processor,
and the expansion of each ``<|image_pad|>`` into one token per post-merger visual token. This module
composes them, reading the same files a hub checkpoint ships, so one code path serves every machine.
GLM-4.6V's patches work the same way (its own image processor and ``<|image|>`` marker); LLaVA-OneVision's
tiles have their own processor (``sparsectx.models.llava_onevision_processor``). Videos (sampled frames,
``sparsectx.data.video``) become temporal patches through the same image processor and each family's
prompt layout (``sparsectx.models.video_input``).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from PIL import Image
from transformers import AutoConfig, AutoTokenizer, BatchFeature, PreTrainedTokenizerBase
from transformers.models.glm46v.image_processing_pil_glm46v import Glm46VImageProcessorPil
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from sparsectx.data.video import Video
from sparsectx.models.llava_onevision_processor import LlavaOnevisionTextProcessor, load_llava_processor
from sparsectx.models.video_input import (
    VIDEO_LAYOUTS,
    check_video_family,
    second_per_grid,
    video_marker,
    video_patches,
    video_placeholder,
    video_slots,
)

IMAGE_TOKEN = "<|image_pad|>"
GLM_IMAGE_TOKEN = "<|image|>"
"""GLM-4.6V's image marker (its chat template wraps it in <|begin_of_image|> ... <|end_of_image|>)."""


class ImageTextProcessor:
    """Turns chat-templated text plus images into ``input_ids``, ``pixel_values`` and ``image_grid_thw``."""

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        image_processor: Qwen2VLImageProcessorPil,
        image_workers: int = 1,
        image_token: str = IMAGE_TOKEN,
        family: str = "",
    ) -> None:
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.merge_unit = int(image_processor.merge_size) ** 2
        self.image_workers = image_workers
        self.image_token = image_token
        """The prompt's one-per-image marker, expanded to one copy per visual token."""
        self.family = family
        """The checkpoint's ``model_type`` ("" for a processor-only folder); picks the video layout."""

    def process_images(self, images: list[Image.Image]) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (pixel_values, image_grid_thw) of ``images``, ``image_workers`` images at a time.

        HF's image processor handles each image on its own and concatenates, so splitting the list across
        threads (numpy and PIL release the GIL) gives the same tensors as one call, in the same order.
        """
        run = lambda part: self.image_processor(images=part, return_tensors="pt")  # noqa: E731
        workers = min(self.image_workers, len(images))
        if workers <= 1:
            out = run(images)
            return out["pixel_values"], out["image_grid_thw"]
        with ThreadPoolExecutor(workers) as pool:
            parts = list(pool.map(run, [[image] for image in images]))
        pixels = torch.cat([part["pixel_values"] for part in parts])
        return pixels, torch.cat([part["image_grid_thw"] for part in parts])

    def apply_chat_template(self, messages: list[dict], tokenize: bool, add_generation_prompt: bool) -> str:
        """Returns the prompt text of ``messages`` under the tokenizer's chat template (one image-pad per image)."""
        return self.tokenizer.apply_chat_template(
            messages, tokenize=tokenize, add_generation_prompt=add_generation_prompt
        )

    def process_videos(self, videos: list[Video]) -> dict[str, torch.Tensor]:
        """Returns ``pixel_values_videos``, ``video_grid_thw`` (and Qwen2.5-VL's ``second_per_grid_ts``).

        Raises:
            ValueError: the checkpoint's family has no video path (``models.video_input``).
        """
        layout = check_video_family(self.family, "videos")
        pairs = [video_patches(video, self.image_processor) for video in videos]
        data = {
            "pixel_values_videos": torch.cat([rows for rows, _ in pairs]),
            "video_grid_thw": torch.stack([grid for _, grid in pairs]),
        }
        if layout == "grid":
            temporal = int(self.image_processor.temporal_patch_size)
            data["second_per_grid_ts"] = torch.tensor([second_per_grid(v, temporal) for v in videos])
        return data

    def _video_texts(self, text: list[str], videos: list[Video], grids: torch.Tensor) -> list[str]:
        """Returns ``text`` with each templated video part (in order, across the batch) expanded."""
        layout = VIDEO_LAYOUTS[self.family]
        marker, temporal = video_marker(layout), int(self.image_processor.temporal_patch_size)
        out, cursor = [], 0
        for prompt in text:
            parts = prompt.split(marker)
            if cursor + len(parts) - 1 > len(videos):
                raise ValueError(
                    f"the prompts hold more video markers {marker!r} than the {len(videos)} videos"
                )
            pieces = [parts[0]]
            for part in parts[1:]:
                pieces.append(
                    video_placeholder(layout, videos[cursor], grids[cursor], self.merge_unit, temporal)
                )
                pieces.append(part)
                cursor += 1
            out.append("".join(pieces))
        if cursor != len(videos):
            raise ValueError(
                f"{len(videos)} videos were given but the prompts hold {cursor} markers {marker!r}: does the "
                "checkpoint's chat template render {'type': 'video'} parts?"
            )
        return out

    def __call__(
        self,
        text: list[str],
        images: list[Image.Image] | None,
        return_tensors: str = "pt",
        padding: bool = True,
        videos: list[Video] | None = None,
    ) -> BatchFeature:
        """Returns token ids (left-padded), attention mask, modality ids (1 = image, 2 = video) and pixel values
        with grids (``pixel_values_videos`` and ``video_grid_thw`` too when ``videos`` are given).

        Each image marker (``image_token``) in ``text`` (in order, across the batch) is expanded to N copies,
        N the number of post-merger tokens of the matching image; each video part as its family lays it out.
        """
        data: dict[str, torch.Tensor] = {}
        counts: list[int] = []
        if images:
            data["pixel_values"], data["image_grid_thw"] = self.process_images(images)
            counts = (data["image_grid_thw"].prod(-1) // self.merge_unit).tolist()
        expanded, cursor = [], 0
        for prompt in text:
            parts = prompt.split(self.image_token)
            pieces = [parts[0]]
            for part in parts[1:]:
                if cursor >= len(counts):
                    raise ValueError(
                        f"the prompts hold more {self.image_token} markers than the {len(counts)} images"
                    )
                pieces.append(self.image_token * counts[cursor] + part)
                cursor += 1
            expanded.append("".join(pieces))
        if cursor != len(counts):
            raise ValueError(
                f"{len(counts)} images were given but the prompts hold {cursor} {self.image_token} markers"
            )
        if videos:  # after the images: GLM-4.6V's video frames are image tokens, never image markers
            data.update(self.process_videos(videos))
            expanded = self._video_texts(expanded, videos, data["video_grid_thw"])
        self.tokenizer.padding_side = "left"
        tokens = self.tokenizer(
            expanded, return_tensors=return_tensors, padding=padding, add_special_tokens=False
        )
        data["input_ids"] = tokens["input_ids"]
        data["attention_mask"] = tokens["attention_mask"]
        image_id = self.tokenizer.convert_tokens_to_ids(self.image_token)
        data["mm_token_type_ids"] = (tokens["input_ids"] == image_id).long()
        if videos:
            slots = video_slots(tokens["input_ids"], VIDEO_LAYOUTS[self.family], self.tokenizer)
            data["mm_token_type_ids"][slots] = 2
        return BatchFeature(data)


def checkpoint_family(path: str | Path) -> str:
    """Returns the ``model_type`` of the checkpoint at ``path`` ("" for a processor-only directory)."""
    local = Path(path)
    if local.is_dir():
        config = local / "config.json"
        return json.loads(config.read_text())["model_type"] if config.is_file() else ""
    return AutoConfig.from_pretrained(str(path)).model_type


def load_processor(
    path: str | Path, image_workers: int = 1
) -> ImageTextProcessor | LlavaOnevisionTextProcessor:
    """Returns the processor stored in a checkpoint directory (tokenizer files + preprocessor_config.json).

    ``image_workers`` is ``model.image_workers``: threads that preprocess a batch's images. GLM-4.6V and
    LLaVA-OneVision checkpoints get their family's image processor and marker (``config.json``'s
    ``model_type``); every other checkpoint the Qwen-VL one.
    """
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    family = checkpoint_family(path)
    if family == "llava_onevision":
        return load_llava_processor(path, tokenizer, image_workers)
    if family == "glm46v":
        image_processor = Glm46VImageProcessorPil.from_pretrained(str(path))
        return ImageTextProcessor(tokenizer, image_processor, image_workers, GLM_IMAGE_TOKEN, family)
    image_processor = Qwen2VLImageProcessorPil.from_pretrained(str(path))
    return ImageTextProcessor(tokenizer, image_processor, image_workers, IMAGE_TOKEN, family)
