"""The LLaVA-OneVision image+text processor: any-resolution views and one ``<image>`` run per image.

Composed, like ``sparsectx.models.processor``, from the checkpoint's tokenizer and PIL image processor
(HF's ``LlavaOnevisionProcessor`` wants a torchvision video processor). An image alone in its prompt is a
base view (the whole image resized to the tower's square) plus the tiles of the best-fitting grid pinpoint;
an image beside others in one prompt is its padded base view only, as HF's processor and model do. Its run
of ``<image>`` tokens has one token per packed feature: the base view's P patches, then the tiles' patches
after unpadding (and anyres_max downscaling) with one newline token per row, or for a base-only image P + 1.

``image_grid_thw`` carries, per image, its layout (views, height, width): the number of views the tower
encodes and the original size, which fix the packing (``sparsectx.models.llava_onevision``).
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from PIL import Image
from transformers import AutoConfig, BatchFeature, PretrainedConfig, PreTrainedTokenizerBase
from transformers.image_processing_utils import select_best_resolution
from transformers.models.llava_onevision.image_processing_pil_llava_onevision import (
    LlavaOnevisionImageProcessorPil,
)
from transformers.models.llava_onevision.modeling_llava_onevision import image_size_to_num_patches

from sparsectx.models.templates import ChatTemplating

IMAGE_TOKEN = "<image>"


def tile_token_count(config: PretrainedConfig, height: int, width: int) -> int:
    """Returns the packed feature count of a tiled image of ``height`` x ``width`` pixels (base + tiles).

    Mirrors ``LlavaOnevisionModel.pack_image_features``: the base view's P = side**2 patches, the tile
    mosaic unpadded to the image's aspect ratio, downscaled when it exceeds anyres_max_m base views, plus
    one newline per mosaic row.
    """
    side = config.vision_config.image_size // config.vision_config.patch_size
    best_h, best_w = select_best_resolution([height, width], config.image_grid_pinpoints)
    rows = side * (best_h // config.vision_config.image_size)
    cols = side * (best_w // config.vision_config.image_size)
    if width / height > cols / rows:
        rows -= 2 * ((rows - int(round(height * (cols / width), 7))) // 2)
    else:
        cols -= 2 * ((cols - int(round(width * (rows / height), 7))) // 2)
    most = int(config.vision_aspect_ratio.removeprefix("anyres_max_"))
    ratio = math.sqrt(rows * cols / (most * side**2))
    if ratio > 1.1:
        rows, cols = int(rows // ratio), int(cols // ratio)
    return side * side + rows * cols + rows


class LlavaOnevisionTextProcessor(ChatTemplating):
    """Turns chat-templated text plus images into ``input_ids``, ``pixel_values`` and per-image layouts."""

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        image_processor: LlavaOnevisionImageProcessorPil,
        config: PretrainedConfig,
        image_workers: int = 1,
    ) -> None:
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.config = config
        self.image_workers = image_workers
        self.image_token = IMAGE_TOKEN
        """The prompt's one-per-image marker, expanded to one copy per packed visual token."""

    def _views(self, groups: list[list[Image.Image]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (pixel_values (n, V_max, 3, S, S), image_sizes (n, 2)) of the grouped images, in order."""
        run = lambda group: self.image_processor(images=[group], return_tensors="pt")  # noqa: E731
        workers = min(self.image_workers, len(groups))
        if workers <= 1:
            parts = [run(group) for group in groups]
        else:
            with ThreadPoolExecutor(workers) as pool:
                parts = list(pool.map(run, groups))
        most = max(part["pixel_values"].shape[1] for part in parts)
        pixels = [
            torch.nn.functional.pad(p["pixel_values"], (0, 0, 0, 0, 0, 0, 0, most - p["pixel_values"].shape[1]))
            for p in parts
        ]
        return torch.cat(pixels), torch.cat([part["image_sizes"] for part in parts])

    def layouts(self, groups: list[list[Image.Image]], sizes: torch.Tensor) -> torch.Tensor:
        """Returns the (n, 3) int64 layouts (views, height, width): a lone image is tiled, others base-only."""
        tiled = [len(group) == 1 for group in groups for _ in group]
        size = self.config.vision_config.image_size
        pinpoints = self.config.image_grid_pinpoints
        views = [
            image_size_to_num_patches(hw, pinpoints, size) if tile else 1
            for hw, tile in zip(sizes.tolist(), tiled, strict=True)
        ]
        return torch.cat([torch.tensor(views)[:, None], sizes], dim=1).long()

    def token_counts(self, layouts: torch.Tensor) -> list[int]:
        """Returns the number of ``<image>`` tokens of each image of ``layouts``."""
        side = self.config.vision_config.image_size // self.config.vision_config.patch_size
        return [
            tile_token_count(self.config, h, w) if views > 1 else side * side + 1 for views, h, w in layouts.tolist()
        ]

    def __call__(
        self,
        text: list[str],
        images: list[Image.Image] | None,
        return_tensors: str = "pt",
        padding: bool = True,
    ) -> BatchFeature:
        """Returns left-padded token ids and attention mask, pixel values, image sizes and layouts.

        ``images`` follow the prompts' markers in order; a prompt's images are grouped by its marker count.
        """
        data: dict[str, torch.Tensor] = {}
        per_prompt = [prompt.count(IMAGE_TOKEN) for prompt in text]
        if sum(per_prompt) != len(images or []):
            raise ValueError(
                f"{len(images or [])} images were given but the prompts hold {sum(per_prompt)} {IMAGE_TOKEN} markers"
            )
        counts: list[int] = []
        if images:
            starts = [sum(per_prompt[:i]) for i in range(len(text))]
            groups = [images[s : s + n] for s, n in zip(starts, per_prompt, strict=True) if n]
            data["pixel_values"], data["image_sizes"] = self._views(groups)
            data["image_grid_thw"] = self.layouts(groups, data["image_sizes"])
            data["batch_num_images"] = torch.tensor([len(group) for group in groups])
            counts = self.token_counts(data["image_grid_thw"])
        expanded, cursor = [], 0
        for prompt in text:
            parts = prompt.split(IMAGE_TOKEN)
            for i in range(1, len(parts)):
                parts[i] = IMAGE_TOKEN * counts[cursor] + parts[i]
                cursor += 1
            expanded.append("".join(parts))
        self.tokenizer.padding_side = "left"
        tokens = self.tokenizer(expanded, return_tensors=return_tensors, padding=padding, add_special_tokens=False)
        data["input_ids"] = tokens["input_ids"]
        data["attention_mask"] = tokens["attention_mask"]
        return BatchFeature(data)


def load_llava_processor(
    path: str | Path,
    tokenizer: PreTrainedTokenizerBase,
    image_workers: int,
    image_processor: LlavaOnevisionImageProcessorPil | None = None,
) -> LlavaOnevisionTextProcessor:
    """Returns the LLaVA-OneVision processor of the checkpoint at ``path`` (its image processor, loaded from the
    folder unless given, and its config)."""
    if image_processor is None:
        image_processor = LlavaOnevisionImageProcessorPil.from_pretrained(str(path))
    return LlavaOnevisionTextProcessor(tokenizer, image_processor, AutoConfig.from_pretrained(str(path)), image_workers)
