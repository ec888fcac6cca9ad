"""An endless, seeded stream of synthetic training items for pretraining the tiny VLM.

Item n is a pure function of (data.seed, n): resuming at optimizer step s continues at item s * batch
with no state to save. Items whose content hash equals a benchmark item's are skipped (and replaced by
the next draw), so pretraining never sees test content.

With a video family (``video`` in the config, ``train.videos_per_batch`` > 0) the first
``videos_per_batch`` items of every batch are clips of that family (``sparsectx.data.video_family``) in the
prompt layout evaluation gives them (``sparsectx.prompting.chat_messages``, Qwen2.5-VL's temporal
positions); the rest are images as before.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch.utils.data import Dataset

from sparsectx.data.config import SuiteConfig
from sparsectx.data.prompt import build_messages, format_question
from sparsectx.data.render import pixel_hash, render_image
from sparsectx.data.synthetic import SLOT_PERIOD, family_context, generate_spec
from sparsectx.data.tsv import content_hash, frames_hash
from sparsectx.data.video import Video
from sparsectx.data.video_family import VideoFamilyConfig, generate_clip
from sparsectx.encoding import rope_positions
from sparsectx.models.processor import IMAGE_TOKEN
from sparsectx.models.video_input import VIDEO_TOKEN, second_per_grid
from sparsectx.prompting import PromptItem, chat_messages
from sparsectx.seeding import derive_seed

STREAM = "pretrain"


@dataclass(frozen=True)
class VideoStream:
    """How the stream draws clips: the family, how many lead each batch, and the model's temporal spacing.

    Attributes:
        family: the video family's config (``conf/data/video/<name>.yaml``).
        per_batch: the first ``per_batch`` items of every batch of ``batch_size`` are clips.
        batch_size: the training batch size (item n is a clip when ``n % batch_size < per_batch``).
        tokens_per_second: the vision config's ``tokens_per_second`` (Qwen2.5-VL's temporal position step
            per second of video).
        temporal_patch: frames per temporal patch.
        merge: the spatial merge size.
        patch: the patch size in pixels.
    """

    family: VideoFamilyConfig
    per_batch: int
    batch_size: int
    tokens_per_second: int
    temporal_patch: int
    merge: int
    patch: int

    def merged_grid(self) -> tuple[int, int, int]:
        """Returns a clip's post-merger grid (temporal patches, rows, columns): its frames kept at full size."""
        side = self.family.frame_size // (self.patch * self.merge)
        return -(-self.family.frames // self.temporal_patch), side, side


class PretrainStream(Dataset):
    """Map-style view of the stream: ``stream[n]`` is item n (uint8 image, prompt ids, response ids)."""

    def __init__(
        self,
        suite: SuiteConfig,
        tokenizer,
        grid: tuple[int, int, int],
        exclude: set[str],
        video: VideoStream | None = None,
    ) -> None:
        self.suite = suite
        self.video = video
        self.tokenizer = tokenizer
        self.grid = grid
        self.image_tokens = grid[0] * grid[1] * grid[2]
        self.image_token_id = tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
        self.video_token_id = tokenizer.convert_tokens_to_ids(VIDEO_TOKEN)
        self.exclude = exclude
        self.ctx = family_context(suite)
        self.names = list(suite.train.family_weights)
        self.weights = [suite.train.family_weights[n] for n in self.names]

    def __len__(self) -> int:
        return 2**62

    def _spec(self, n: int, attempt: int):
        pick = random.Random(derive_seed(self.suite.seed, STREAM, "pick", n, attempt))
        family, slot = pick.choices(self.names, weights=self.weights)[0], pick.randrange(SLOT_PERIOD)
        rng = random.Random(derive_seed(self.suite.seed, STREAM, n, attempt))
        return generate_spec(family, slot, rng, self.ctx)

    def __getitem__(self, n: int) -> dict[str, torch.Tensor]:
        """Returns item n: ``image`` (H, W, 3) or ``clip`` (T, H, W, 3) uint8, its ``ids``, ``prompt_len`` and
        (3, L) positions.

        Positions are computed here, in the data worker, so the model never runs its per-sample Python
        position loop on the training step's critical path.
        """
        if self.video is not None and n % self.video.batch_size < self.video.per_batch:
            return self._clip(n)
        attempt = 0
        while True:
            spec = self._spec(n, attempt)
            image = render_image(spec.scene, self.suite.scene.colors, self.suite.scene.background)
            question = format_question(spec.question, spec.options, self.suite.prompt.mcq_hint)
            if content_hash(pixel_hash(image), spec.question) not in self.exclude:
                break
            attempt += 1
        messages = build_messages(question, self.suite.prompt.system, self.suite.prompt.instruction, None)
        prompt = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        prompt = prompt.replace(IMAGE_TOKEN, IMAGE_TOKEN * self.image_tokens)
        encode = lambda text: self.tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
        ids = torch.tensor(encode(prompt) + encode(spec.trace + "<|im_end|>"), dtype=torch.long)
        prompt_len = len(encode(prompt))
        positions, _ = rope_positions(ids, self.image_token_id, [self.grid])
        return {
            "image": torch.from_numpy(np.asarray(image, dtype=np.uint8).copy()),
            "ids": ids,
            "prompt_len": prompt_len,
            "positions": positions,
        }

    def clip_prompt(self, n: int) -> tuple[PromptItem, str]:
        """Returns item n's clip as the prompt evaluation would build for it, and its reference trace.

        The clip is redrawn while it equals a benchmark clip (by content hash).
        """
        video = self.video
        scene = replace(self.suite.scene, image_size=video.family.frame_size)
        attempt = 0
        while True:
            pick = random.Random(derive_seed(self.suite.seed, STREAM, "clip", n, attempt))
            spec = generate_clip(pick, pick.randrange(SLOT_PERIOD), scene, video.family)
            frames = [render_image(s, scene.colors, scene.background) for s in spec.scenes]
            if content_hash(frames_hash(frames), spec.question) not in self.exclude:
                break
            attempt += 1
        # Capped at its own token count, as the benchmark config caps it, so the processor keeps the frame size.
        groups, rows, cols = video.merged_grid()
        tokens = groups * rows * cols
        clip = Video(
            tuple(frames),
            tuple(range(len(frames))),
            video.family.fps,
            len(frames),
            f"stream item {n}",
            tokens,
        )
        item = PromptItem(
            sample_id=str(n),
            images=[],
            videos=[clip],
            system=self.suite.prompt.system,
            question=format_question(spec.question, spec.options, self.suite.prompt.mcq_hint),
            instruction=self.suite.prompt.instruction,
        )
        return item, spec.trace

    def _clip(self, n: int) -> dict[str, torch.Tensor]:
        """Returns item n as a clip of the video family: (T, H, W, 3) uint8 frames, ids and positions."""
        video = self.video
        item, trace = self.clip_prompt(n)
        frames = item.videos[0].frames
        prompt = self.tokenizer.apply_chat_template(chat_messages(item), tokenize=False, add_generation_prompt=True)
        prompt = prompt.replace(VIDEO_TOKEN, VIDEO_TOKEN * item.videos[0].max_tokens)
        encode = lambda text: self.tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
        prompt_ids = encode(prompt)
        ids = torch.tensor(prompt_ids + encode(trace + "<|im_end|>"), dtype=torch.long)
        step = video.tokens_per_second * int(second_per_grid(item.videos[0], video.temporal_patch))
        positions, _ = rope_positions(ids, self.video_token_id, [video.merged_grid()], [step])
        return {
            "clip": torch.from_numpy(np.stack([np.asarray(f, dtype=np.uint8) for f in frames])),
            "ids": ids,
            "prompt_len": len(prompt_ids),
            "positions": positions,
        }


def collate(items: list[dict[str, torch.Tensor]], pad_id: int) -> dict[str, torch.Tensor]:
    """Returns a right-padded batch: images (B_i, H, W, 3) and clips (B_v, T, H', W', 3) uint8 (either may be
    empty; the clips lead the batch), input_ids, attention_mask, position_ids (3, B, L) and labels (-100 = no
    loss)."""
    width = max(it["ids"].numel() for it in items)
    ids = torch.full((len(items), width), pad_id, dtype=torch.long)
    labels = torch.full((len(items), width), -100, dtype=torch.long)
    mask = torch.zeros((len(items), width), dtype=torch.long)
    positions = torch.zeros((3, len(items), width), dtype=torch.long)
    for b, it in enumerate(items):
        n, p = it["ids"].numel(), it["prompt_len"]
        ids[b, :n] = it["ids"]
        labels[b, p:n] = it["ids"][p:]
        mask[b, :n] = 1
        positions[:, b, :n] = it["positions"]
    images, clips = (
        [it["image"] for it in items if "image" in it],
        [it["clip"] for it in items if "clip" in it],
    )
    return {
        "images": torch.stack(images) if images else None,
        "clips": torch.stack(clips) if clips else None,
        "input_ids": ids,
        "attention_mask": mask,
        "position_ids": positions,
        "labels": labels,
    }
