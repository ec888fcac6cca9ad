"""Chat prompts in the seeds' protocol: system message, video(s) and image(s) before the text, think/answer
instruction."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

from PIL import Image
from transformers import BatchFeature

from sparsectx.data.video import Video
from sparsectx.models.processor import ImageTextProcessor
from sparsectx.models.video_input import video_refusal

Row = TypeVar("Row")


@dataclass
class PromptItem:
    """One question to ask a VLM.

    Attributes:
        sample_id: stable id of the item (benchmark index, training row, ...).
        images: the item's images, in the order they appear before the text.
        question: the user question only (pruners that read text condition on it).
        system: the system message.
        instruction: text appended after the question (the think/answer instruction), may be empty.
        extra_context: text the prompt carries after the instruction but pruners never see (e.g. the
            reference answer given to SCOPD+GT's teacher).
        videos: the item's videos, placed before its images; each is one visual input of the encoded sample
            (one budget over all of a video's tokens).
    """

    sample_id: str
    images: list[Image.Image]
    question: str
    system: str
    instruction: str
    extra_context: str = field(default="")
    videos: list[Video] = field(default_factory=list)


def user_text(item: PromptItem) -> str:
    """Returns the text part of the user turn: question, then instruction, then any extra context."""
    return "\n".join(part for part in (item.question, item.instruction, item.extra_context) if part)


def chat_messages(item: PromptItem) -> list[dict]:
    """Returns the chat messages for ``item`` (system, then a user turn with videos, images, then text)."""
    content = [{"type": "video"} for _ in item.videos] + [{"type": "image"} for _ in item.images]
    content.append({"type": "text", "text": user_text(item)})
    return [
        {"role": "system", "content": [{"type": "text", "text": item.system}]},
        {"role": "user", "content": content},
    ]


def processor_inputs(processor: ImageTextProcessor, items: list[PromptItem]) -> BatchFeature:
    """Returns the processor's tensors (input_ids, pixel_values, image_grid_thw) for a batch of prompts."""
    for item in items:
        for number, image in enumerate(item.images):
            if not isinstance(image, Image.Image):
                raise ValueError(
                    f"sample {item.sample_id!r}: image {number} is {type(image).__name__}, not a decoded PIL image "
                    "(missing or unreadable image file?)"
                )
    texts = [
        processor.apply_chat_template(chat_messages(item), tokenize=False, add_generation_prompt=True) for item in items
    ]
    images = [image for item in items for image in item.images]
    videos = [video for item in items for video in item.videos]
    if not videos:
        return processor(text=texts, images=images or None, return_tensors="pt", padding=True)
    if not isinstance(processor, ImageTextProcessor):
        raise video_refusal("llava_onevision", f"sample {items[0].sample_id!r} videos")
    return processor(text=texts, images=images or None, return_tensors="pt", padding=True, videos=videos)


def build_prompts(build: Callable[[Row], PromptItem], rows: Sequence[Row], workers: int) -> list[PromptItem]:
    """Returns ``[build(row) for row in rows]``, on ``workers`` threads when there are several.

    Building a prompt decodes its images (a 1296-token PNG takes ~30 ms); PIL releases the GIL while it
    decodes, so threads (``model.image_workers``, carried by the processor) overlap them. Order is kept.
    """
    if workers <= 1 or len(rows) <= 1:
        return [build(row) for row in rows]
    with ThreadPoolExecutor(min(workers, len(rows))) as pool:
        return list(pool.map(build, rows))
