"""An endless, seeded stream of synthetic training items for pretraining the tiny VLM.

Item n is a pure function of (data.seed, n): resuming at optimizer step s continues at item s * batch
with no state to save. Items whose content hash equals a benchmark item's are skipped (and replaced by
the next draw), so pretraining never sees test content.
"""

from __future__ import annotations

import random

import numpy as np
import torch
from torch.utils.data import Dataset

from sparsectx.data.config import SuiteConfig
from sparsectx.data.prompt import build_messages, format_question
from sparsectx.data.render import pixel_hash, render_image
from sparsectx.data.synthetic import SLOT_PERIOD, derive_seed, family_context, generate_spec
from sparsectx.data.tsv import content_hash
from sparsectx.encoding import rope_positions
from sparsectx.models.processor import IMAGE_TOKEN

STREAM = "pretrain"


class PretrainStream(Dataset):
    """Map-style view of the stream: ``stream[n]`` is item n (uint8 image, prompt ids, response ids)."""

    def __init__(self, suite: SuiteConfig, tokenizer, grid: tuple[int, int, int], exclude: set[str]) -> None:
        self.suite = suite
        self.tokenizer = tokenizer
        self.grid = grid
        self.image_tokens = grid[0] * grid[1] * grid[2]
        self.image_token_id = tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
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
        """Returns item n: ``image`` (H, W, 3) uint8, ``prompt`` / ``response`` int64 ids and (3, L) positions.

        Positions are computed here, in the data worker, so the model never runs its per-sample Python
        position loop on the training step's critical path.
        """
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


def collate(items: list[dict[str, torch.Tensor]], pad_id: int) -> dict[str, torch.Tensor]:
    """Returns a right-padded batch: images (B, H, W, 3) uint8, input_ids, attention_mask, position_ids (3, B, L)
    and labels (-100 = no loss)."""
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
    return {
        "images": torch.stack([it["image"] for it in items]),
        "input_ids": ids,
        "attention_mask": mask,
        "position_ids": positions,
        "labels": labels,
    }
