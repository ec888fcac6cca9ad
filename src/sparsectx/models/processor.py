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

What a checkpoint folder decides (``load_processor``): its ``config.json`` picks the family record
(``sparsectx.models.families``; an accepted alias such as GLM-4.6V-Flash's ``glm4v`` included), its
``preprocessor_config.json`` (or ``processor_config.json``'s ``image_processor``) names the image processor
(``image_processor_type``) and carries its settings, and its chat template renders the prompts
(``sparsectx.models.templates``: the tokenizer's, else the processor's; one image marker per image is checked
at load). ``model.max_visual_tokens`` caps the post-merger tokens of one image by lowering the processor's
pixel bound (``cap_visual_tokens``); ``model.thinking`` is passed to the template as the family's switch.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from transformers import AutoTokenizer, BatchFeature, PreTrainedTokenizerBase
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from sparsectx.data.video import Video
from sparsectx.models.families import FAMILIES
from sparsectx.models.family import PROCESSOR_ONLY_FAMILY, FamilySpec
from sparsectx.models.llava_onevision_processor import LlavaOnevisionTextProcessor, load_llava_processor
from sparsectx.models.templates import (
    ChatTemplating,
    check_image_markers,
    find_chat_template,
    opens_thinking,
    template_thinking_default,
)
from sparsectx.models.video_input import (
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


class ImageTextProcessor(ChatTemplating):
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
        """The checkpoint's family name (``FamilySpec.name``; "" when built by hand); picks the video layout."""

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
        layout = check_video_family(self.family, "videos")
        marker, temporal = video_marker(layout), int(self.image_processor.temporal_patch_size)
        out, cursor = [], 0
        for prompt in text:
            parts = prompt.split(marker)
            if cursor + len(parts) - 1 > len(videos):
                raise ValueError(f"the prompts hold more video markers {marker!r} than the {len(videos)} videos")
            pieces = [parts[0]]
            for part in parts[1:]:
                pieces.append(video_placeholder(layout, videos[cursor], grids[cursor], self.merge_unit, temporal))
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
                    raise ValueError(f"the prompts hold more {self.image_token} markers than the {len(counts)} images")
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
        tokens = self.tokenizer(expanded, return_tensors=return_tensors, padding=padding, add_special_tokens=False)
        data["input_ids"] = tokens["input_ids"]
        data["attention_mask"] = tokens["attention_mask"]
        image_id = self.tokenizer.convert_tokens_to_ids(self.image_token)
        data["mm_token_type_ids"] = (tokens["input_ids"] == image_id).long()
        if videos:
            slots = video_slots(tokens["input_ids"], check_video_family(self.family, "videos"), self.tokenizer)
            data["mm_token_type_ids"][slots] = 2
        return BatchFeature(data)


def checkpoint_family(path: str | Path) -> str:
    """Returns the ``model_type`` of the checkpoint folder at ``path`` ("" for a processor-only directory); a hub
    id is resolved to its pinned snapshot folder first (``loading.resolve_checkpoint``)."""
    config = Path(path) / "config.json"
    return json.loads(config.read_text())["model_type"] if config.is_file() else ""


def _read_json(path: str | Path, name: str) -> dict[str, Any] | None:
    """Returns the parsed ``name`` of the checkpoint folder at ``path``, None if absent."""
    file = Path(path) / name
    return json.loads(file.read_text()) if file.is_file() else None


def checkpoint_spec(path: str | Path) -> FamilySpec:
    """Returns the family record of the checkpoint at ``path`` (its config.json's model_type and architectures;
    the tiny model's family for a processor-only folder).

    Raises:
        KeyError: the model_type or architectures are not served, naming the folder and the supported ones.
    """
    config = _read_json(path, "config.json")
    if config is None:
        return FAMILIES.by_name(PROCESSOR_ONLY_FAMILY)
    return FAMILIES.for_config(config, f"{path}/config.json")


def declared_image_processor(path: str | Path) -> tuple[str | None, str]:
    """Returns (``image_processor_type``, the file that declares it) of the checkpoint at ``path``:
    ``preprocessor_config.json``, else ``processor_config.json``'s ``image_processor`` section."""
    pre = _read_json(path, "preprocessor_config.json")
    if pre is not None:
        return pre.get("image_processor_type"), f"{path}/preprocessor_config.json"
    proc = _read_json(path, "processor_config.json") or {}
    return (proc.get("image_processor") or {}).get("image_processor_type"), f"{path}/processor_config.json"


def pixels_per_token(image_processor: Any, spec: FamilySpec) -> int:
    """Returns the processor-bound pixels one post-merger token stands for: (patch * merge)^2, times the
    temporal patch size where the family's bounds count both temporal copies of an image (GLM)."""
    factor = int(image_processor.patch_size) * int(image_processor.merge_size)
    temporal = int(image_processor.temporal_patch_size) if spec.temporal_in_pixel_bounds else 1
    return factor * factor * temporal


def cap_visual_tokens(image_processor: Any, spec: FamilySpec, tokens: int, where: str) -> None:
    """Returns None after lowering ``image_processor``'s pixel bound so that no image exceeds ``tokens``
    post-merger tokens (``model.max_visual_tokens``); a bound already lower is kept.

    Raises:
        ValueError: the family tiles its images (no pixel bound), or ``tokens`` < 1 (naming ``where``).
    """
    if spec.tiled:
        raise ValueError(
            f"model.max_visual_tokens={tokens} but family {spec.name!r} ({where}) tiles its images at fixed view "
            "sizes and has no pixel bound to lower; set model.max_visual_tokens=null"
        )
    if tokens < 1:
        raise ValueError(f"model.max_visual_tokens={tokens} must be a positive integer or null")
    size = dict(image_processor.size)
    longest = min(int(size["longest_edge"]), tokens * pixels_per_token(image_processor, spec))
    image_processor.size = {"shortest_edge": min(int(size["shortest_edge"]), longest), "longest_edge": longest}


def check_thinking(processor: ChatTemplating, spec: FamilySpec, thinking: bool | None) -> None:
    """Returns None if ``model.thinking`` (``thinking``) can be honoured by the processor's template.

    Raises:
        ValueError: thinking is set but the family has no switch, or the template ignores it (naming the file).
    """
    if thinking is None:
        return
    template = processor._template()
    if spec.thinking_switch is None:
        raise ValueError(
            f"model.thinking={thinking} but family {spec.name!r} has no thinking switch in its chat template "
            f"({template.source}); set model.thinking=null"
        )
    switch = spec.thinking_switch
    if template_thinking_default(processor.tokenizer, template, switch) is None:
        raise ValueError(
            f"model.thinking={thinking} but the chat template from {template.source} renders the same "
            f"generation prompt whatever {switch} is; set model.thinking=null or use the checkpoint's template"
        )


def check_answer_prefix(processor: ChatTemplating) -> None:
    """Returns None if ``model.answer_prefix`` (``processor.answer_prefix``) follows a generation prompt that
    leaves no thinking block open.

    Raises:
        ValueError: the template opens a thinking block (``model.thinking`` on) and the prefix would be written
            inside it, naming the template's file and the fix.
    """
    prefix = processor.answer_prefix
    if prefix.strip() and opens_thinking(processor.generation_prefix, processor.thinking_tags):
        raise ValueError(
            f"model.answer_prefix={prefix!r} would be pre-filled inside the thinking block that the chat template "
            f"from {processor._template().source} opens ({processor.generation_prefix!r}); set model.thinking=false "
            "(the template then closes an empty block before it) or model.answer_prefix=''"
        )


def load_processor(
    path: str | Path,
    image_workers: int = 1,
    max_visual_tokens: int | None = None,
    thinking: bool | None = None,
    answer_prefix: str = "",
) -> ImageTextProcessor | LlavaOnevisionTextProcessor:
    """Returns the processor stored in a checkpoint directory (tokenizer, image processor, chat template).

    ``image_workers`` is ``model.image_workers`` (threads preprocessing a batch's images),
    ``max_visual_tokens`` ``model.max_visual_tokens`` (null = the checkpoint's own pixel bound),
    ``thinking`` ``model.thinking`` (null = the template's default) and ``answer_prefix``
    ``model.answer_prefix`` (text pre-filled after the generation prompt). The family comes from ``config.json``
    (``checkpoint_spec``), the image processor class from the declared ``image_processor_type`` with the
    checkpoint's own settings, the template from ``templates.find_chat_template``.

    Raises:
        KeyError: the checkpoint's family is not supported.
        ValueError: the image processor is not one the family reads, the template does not render one image
            marker per image, ``thinking`` cannot be honoured, or ``answer_prefix`` would fall inside an open
            thinking block (each naming the file).
        FileNotFoundError: no chat template in the folder.
    """
    spec = checkpoint_spec(path)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    declared, where = declared_image_processor(path)
    image_processor = spec.image_processor_class(declared, where).from_pretrained(str(path))
    if max_visual_tokens is not None:
        cap_visual_tokens(image_processor, spec, max_visual_tokens, where)
    if spec.tiled:
        processor = load_llava_processor(path, tokenizer, image_workers, image_processor)
    else:
        processor = ImageTextProcessor(tokenizer, image_processor, image_workers, spec.image_marker, spec.name)
    processor.chat_template = find_chat_template(path, tokenizer)
    if tokenizer.chat_template != processor.chat_template.text:  # the processor's template, or a named default
        tokenizer.chat_template = processor.chat_template.text
    processor.thinking_switch, processor.thinking_tags = spec.thinking_switch, spec.thinking_tags
    processor.thinking_setting = thinking
    processor.answer_prefix = answer_prefix
    processor.spec = spec
    check_thinking(processor, spec, thinking)
    check_answer_prefix(processor)
    check_image_markers(tokenizer, processor._template(), spec.image_marker, processor.template_switches())
    return processor
