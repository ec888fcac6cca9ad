"""Training items in a resumable order, the prompts built from them, and the teacher's privileged prompt.

The data order is a pure function of (seed, epoch): epoch e is a permutation drawn from
``derive_seed(seed, "train_order", e)`` (``train_data.order=shuffled``) or the file's own row order
(``file``), and the item at global position p is entry ``p mod n`` of epoch ``p div n``. A run therefore
resumes from the number of samples it has consumed and nothing else. Under ``file`` the step that starts at
sample s = i·B (B = ``method.effective_batch_size``) takes rows i·B … i·B + B − 1: a balanced sampler's
batches (``sparsectx.data.sources``, whose ``batch`` column is checked against B) are the run's steps.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from sparsectx.data import Item, format_question, read_tsv
from sparsectx.encoding import EncodedSample
from sparsectx.models.adapter import VLMAdapter
from sparsectx.models.processor import ImageTextProcessor
from sparsectx.models.templates import opens_thinking
from sparsectx.prompting import PromptItem, chat_messages
from sparsectx.seeding import derive_seed
from sparsectx.training.config import TrainDataConfig

log = logging.getLogger(__name__)


def require_training_file(cfg: TrainDataConfig) -> None:
    """Returns None if ``cfg.path`` is a file; raises ``FileNotFoundError`` naming the key and its builder."""
    path = Path(cfg.path)
    if not path.is_file():
        raise FileNotFoundError(
            f"train_data.path={cfg.path!r}: no such file ({path.resolve()}); build the training split with "
            f"`python src/build_data.py` (it writes <data.out_dir>/train.tsv), or set train_data.path=<file>"
        )


SAMPLER_BATCH = "batch"
"""The column a balanced sampler writes: each row's batch, 0 … num_batches − 1 (``data.sources.training_set``)."""


@dataclass
class TrainingSet:
    """The usable training items and the order they are visited in (seeded permutations, or the file's)."""

    items: list[Item]
    seed: int
    shuffled: bool = True
    """True: each epoch is a seeded permutation (``train_data.order=shuffled``); False: the file's order."""
    _orders: dict[int, list[int]] = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, cfg: TrainDataConfig, seed: int, batch_size: int) -> TrainingSet:
        """Returns the items of ``cfg.path`` in ``cfg.order``; raises if the file is missing, empty or skips more
        rows than allowed (any row under ``order=file``). ``batch_size`` is the run's prompts per step, checked
        against a sampler-written ``batch`` column (``check_sampler_order``)."""
        require_training_file(cfg)
        items, skips = read_tsv(Path(cfg.path))
        total = len(items) + len(skips)
        for skip in skips[:5]:
            log.warning("train_data.path=%s: skipped row %s (%s)", cfg.path, skip.index, skip.reason)
        if not items or len(skips) > cfg.max_skip_fraction * total:
            raise ValueError(
                f"train_data.path={cfg.path!r}: {len(skips)} of {total} rows are unusable (allowed share "
                f"train_data.max_skip_fraction={cfg.max_skip_fraction}); first reasons: "
                f"{[s.reason for s in skips[:3]]}"
            )
        if cfg.order == "file" and skips:
            raise ValueError(
                f"train_data.path={cfg.path!r}: {len(skips)} of {total} rows are unusable (first: row "
                f"{skips[0].index}, {skips[0].reason}) and train_data.order=file reads the rows in the file's "
                "order, so every later step's batch would shift by them; repair the rows, or set "
                "train_data.order=shuffled"
            )
        check_sampler_order(items, cfg, batch_size)
        return cls(items=items, seed=seed, shuffled=cfg.order == "shuffled")

    def order(self, epoch: int) -> list[int]:
        """Returns the item indices in the order visited in ``epoch`` (the file's order when not shuffled)."""
        if not self.shuffled:
            return list(range(len(self.items)))
        if epoch not in self._orders:
            generator = torch.Generator().manual_seed(derive_seed(self.seed, "train_order", epoch))
            self._orders = {epoch: torch.randperm(len(self.items), generator=generator).tolist()}
        return self._orders[epoch]

    def item_at(self, position: int) -> Item:
        """Returns the item at global sample position ``position`` (>= 0)."""
        epoch, offset = divmod(position, len(self.items))
        return self.items[self.order(epoch)[offset]]


def check_sampler_order(items: list[Item], cfg: TrainDataConfig, batch_size: int) -> None:
    """Returns None after warning when a balanced sampler's batches will not be the run's steps.

    A file with a ``batch`` column was written batch by batch by a balanced sampler. Under
    ``train_data.order=shuffled`` its batches are mixed (a warning says how to keep them); under ``file`` row p
    is trained at step p div ``batch_size`` of the first epoch, which must be its ``batch`` (a warning names
    the first row where it is not: the sampler's per-batch quotas then hold only approximately).

    Raises:
        ValueError: a ``batch`` cell is not an integer (names the row).
    """
    if not items or SAMPLER_BATCH not in items[0].extra:
        return
    if cfg.order == "shuffled":
        log.warning(
            "train_data.path=%s has a sampler's %r column but train_data.order=shuffled mixes its batches; set "
            "train_data.order=file to train on them in the file's order",
            cfg.path,
            SAMPLER_BATCH,
        )
        return
    for position, item in enumerate(items):
        cell = item.extra.get(SAMPLER_BATCH, "")
        if not cell.strip().isdigit():
            raise ValueError(
                f"train_data.path={cfg.path!r}: row {item.index} has {SAMPLER_BATCH}={cell!r}, not an integer"
            )
        if int(cell) != position // batch_size:
            log.warning(
                "train_data.path=%s: row %s (position %d) is in the sampler's batch %s but trains in step %d of "
                "method.effective_batch_size=%d prompts; the file's batches are not the run's steps",
                cfg.path,
                item.index,
                position,
                cell,
                position // batch_size,
                batch_size,
            )
            return


def reference_text(item: Item) -> str:
    """Returns the item's reference response: its ``<think>…</think><answer>…</answer>`` trace or answer."""
    return item.trace if item.trace.strip() else f"<answer>{item.answer}</answer>"


def reference_continuation(reference: str, opened: str, tags: tuple[str, str] = ("<think>", "</think>")) -> str:
    """Returns the part of ``reference`` that follows a generation prompt which already holds ``opened``.

    ``opened`` is what the prompt holds after the assistant header (``ChatTemplating.prefilled``: the template's
    ``generation_prefix``, then ``model.answer_prefix``): "" (nothing: the reference as written), an open
    thinking block (Qwen3.5's ``"<think>\n"``: the reference continues inside it, so its own opening tag is not
    repeated; an answer-only reference first closes the block empty, as the template writes an empty one), or
    a closed empty block or none with text after it (thinking off, or an answer prefix: the reference's
    thinking is dropped, and what ``opened`` holds after the block, e.g. ``<answer>``, is cut from the start of
    its answer). Without this a trace ``<think>…`` after ``"<think>\n"`` would train the student on
    ``<think>\n<think>``, and ``<answer>…`` after an ``<answer>`` prefix on ``<answer><answer>``.

    Raises:
        ValueError: ``opened`` pre-fills text inside an open thinking block, or the reference's answer does not
            begin with what ``opened`` pre-fills after the block (naming both).
    """
    start, end = tags
    if not opened.strip():
        return reference
    body = reference.lstrip()
    if opens_thinking(opened, tags):
        inside = opened[opened.rindex(start) + len(start) :]
        if inside.strip():
            raise ValueError(
                f"the prompt pre-fills {inside.strip()!r} inside an open thinking block ({opened!r}); a reference "
                "response cannot continue it. Set model.thinking=false (or model.answer_prefix='') for "
                "reference-prefix methods"
            )
        if body.startswith(start):
            rest = body[len(start) :]
            return rest[1:] if opened.endswith("\n") and rest.startswith("\n") else rest
        return f"\n{end}\n\n{body}"
    if body.startswith(start) and end in body:
        body = body[body.index(end) + len(end) :].lstrip()
    closed = opened.rfind(end)
    after = opened if closed < 0 else opened[closed + len(end) :]
    if not after.strip():
        return body
    if not body.startswith(after.strip()):
        raise ValueError(
            f"the reference response {reference[:80]!r} does not begin its answer with {after.strip()!r}, which "
            f"the prompt pre-fills (model.answer_prefix; the prompt opens {opened!r}); write references as "
            "<think>…</think><answer>…</answer> or <answer>…</answer>, or set model.answer_prefix to how they begin"
        )
    rest = body[len(after.strip()) :]
    return rest.lstrip() if after != after.rstrip() else rest


def prompt_item(item: Item, cfg: TrainDataConfig, position: int) -> PromptItem:
    """Returns the student's prompt for ``item`` (no reference in it), identified by its sample position."""
    return PromptItem(
        sample_id=f"{item.index}@{position}",
        images=[item.image()],
        question=format_question(item.question, item.options, cfg.mcq_hint),
        system=cfg.system,
        instruction=cfg.instruction,
    )


def with_reference(prompt: PromptItem, item: Item, template: str) -> PromptItem:
    """Returns ``prompt`` with the reference in its user turn (SCOPD+GT's teacher; pruners never see it)."""
    return replace(prompt, extra_context=template.replace("{reference}", reference_text(item)))


def expand_image_tokens(text: str, counts: list[int], marker: str) -> str:
    """Returns ``text`` with its i-th image ``marker`` repeated ``counts[i]`` times (one per token)."""
    parts = text.split(marker)
    if len(parts) - 1 != len(counts):
        raise ValueError(f"prompt holds {len(parts) - 1} {marker} markers but {len(counts)} images")
    return parts[0] + "".join(marker * n + part for n, part in zip(counts, parts[1:], strict=True))


def reencode_text(
    adapter: VLMAdapter, processor: ImageTextProcessor, prompt: PromptItem, sample: EncodedSample
) -> EncodedSample:
    """Returns ``sample`` re-tokenized for ``prompt``'s text, reusing its encoded images (no vision run).

    Used for the teacher's privileged prompt: same images, longer text. With the same prompt it reproduces
    ``encode_samples`` exactly (tested).
    """
    text = processor.apply_chat_template(chat_messages(prompt), tokenize=False, add_generation_prompt=True)
    text = expand_image_tokens(text, [image.num_tokens for image in sample.images], processor.image_token)
    ids = processor.tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids[0]
    positions, next_position = adapter.prompt_positions(ids, sample.images)
    device = sample.prompt_ids.device
    return EncodedSample(
        sample_id=sample.sample_id,
        prompt_ids=ids.to(device),
        positions=positions.to(device),
        images=sample.images,
        question_embeds=sample.question_embeds,
        next_position=next_position,
    )


def turn_end_id(processor: ImageTextProcessor) -> int:
    """Returns the id that ends an assistant turn: ``<|im_end|>`` when the tokenizer has it, else its eos."""
    tokenizer = processor.tokenizer
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if isinstance(im_end, int) and im_end != tokenizer.unk_token_id:
        return im_end
    if tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has neither <|im_end|> nor an eos token; cannot end reference responses")
    return int(tokenizer.eos_token_id)


def reference_ids(
    processor: ImageTextProcessor, text: str, max_tokens: int | None, device: torch.device
) -> torch.Tensor:
    """Returns (T,) int64 ids of a reference response plus end-of-turn, cut to ``max_tokens`` if given."""
    ids = processor.tokenizer(text, add_special_tokens=False).input_ids + [turn_end_id(processor)]
    return torch.tensor(ids[:max_tokens], dtype=torch.long, device=device)
