"""Prefix sources: where the response tokens the loss is computed on come from (``method.prefix``).

- ``rollout``: on-policy samples of the current student from its pruned context x_b (eval mode, no_grad, KV
  cache), with the method's sampling settings. Strictly on-policy: the same weights roll out, score and train
  within an optimizer step, so no importance weights are needed (spec §1.1).
- ``reference``: the item's reference response (trace or answer) plus the end-of-turn token, cut to
  ``max_new_tokens`` (SFT; fixed-prefix KD).

Both return a ``Prefix``; the loss mask covers every prefix token up to and including the end-of-turn token.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from sparsectx.data import Item
from sparsectx.encoding import EncodedSample
from sparsectx.engine import EngineConfig, engine_for, pruned_prompts
from sparsectx.eval.extract import extract_answer
from sparsectx.generation import SamplingConfig
from sparsectx.registry import Registry
from sparsectx.training.batches import reference_continuation, reference_ids, reference_text
from sparsectx.training.decode_copy import rollout_adapter
from sparsectx.training.student import Student, mode
from sparsectx.visual import Selection


@dataclass
class Prefix:
    """The response prefixes of a list of samples (one micro-batch, or a whole step before it is split).

    Attributes:
        tokens: per sample, (T_i,) int64 ids on the model's device, T_i >= 1.
        texts: per sample, the response they end (``ChatTemplating.response``: ``model.answer_prefix``, then
            the tokens' text with special tokens removed), what correctness and rewards read.
        stopped: per sample, whether an end token or stop string ended it (references always True).
    """

    tokens: list[torch.Tensor]
    texts: list[str]
    stopped: list[bool]

    def padded(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (B, T) int64 ids right-padded with 0 and the (B, T) bool mask of real tokens."""
        width = max(t.numel() for t in self.tokens)
        device = self.tokens[0].device
        ids = torch.zeros(len(self.tokens), width, dtype=torch.long, device=device)
        mask = torch.zeros(len(self.tokens), width, dtype=torch.bool, device=device)
        for row, tokens in enumerate(self.tokens):
            ids[row, : tokens.numel()] = tokens
            mask[row, : tokens.numel()] = True
        return ids, mask


@dataclass
class PrefixInputs:
    """What a prefix source may use: the samples of one optimizer step on this process."""

    student: Student
    items: list[Item]
    encoded: list[EncodedSample]
    selections: list[list[Selection]]
    sampling: SamplingConfig
    generator: torch.Generator
    engine: EngineConfig
    """The decode engine's settings."""
    slots: int | None
    """Rollouts decoded at once (``rollout_batch_size``); None = every sample given."""
    weights: str
    """``rollout_weights``: decode with the live student or a twin of its weights (``decode_copy``)."""


PrefixSource = Callable[[PrefixInputs], Prefix]
PREFIX_SOURCES: Registry[PrefixSource] = Registry("prefix source")


@PREFIX_SOURCES.register("rollout")
def rollout_prefix(inputs: PrefixInputs) -> Prefix:
    """Returns on-policy student rollouts from the pruned contexts x_b (SCOPD Eq. 1)."""
    student = inputs.student
    adapter = rollout_adapter(student, inputs.weights, student.adapter.signal_chunk)
    prompts = pruned_prompts(adapter, inputs.encoded, inputs.selections)
    engine = engine_for(adapter, student.processor.tokenizer, inputs.engine)
    with torch.no_grad(), mode(student.model, training=False), student.compute():
        outs = engine.generate(prompts, inputs.sampling, inputs.generator, slots=inputs.slots)
    device = inputs.encoded[0].prompt_ids.device
    empty = [i for i, out in enumerate(outs) if out.token_ids.numel() == 0]
    if empty:
        raise RuntimeError(f"rollouts {empty} came back empty; generate must return at least one token")
    return Prefix(
        tokens=[out.token_ids.to(device) for out in outs],
        texts=[student.processor.response(out.text) for out in outs],
        stopped=[out.stopped for out in outs],
    )


@PREFIX_SOURCES.register("reference")
def reference_prefix(inputs: PrefixInputs) -> Prefix:
    """Returns each item's reference response plus end-of-turn, cut to ``sampling.max_new_tokens``; the part of
    it the prompt already holds (``batches.reference_continuation``: an opened ``<think>``, the answer prefix)
    is not repeated."""
    device = inputs.encoded[0].prompt_ids.device
    processor = inputs.student.processor
    opened = processor.prefilled  # a pre-opened <think> or a pre-filled <answer> must not be trained twice
    texts = [reference_continuation(reference_text(item), opened, processor.thinking_tags) for item in inputs.items]
    full = [reference_ids(processor, text, None, device) for text in texts]
    limit = inputs.sampling.max_new_tokens
    return Prefix(
        tokens=[ids[:limit] for ids in full],
        texts=[processor.response(text) for text in texts],
        stopped=[ids.numel() <= limit for ids in full],
    )


def normalize_answer(text: str) -> str:
    """Returns ``text`` case-folded, stripped of surrounding space and a final period."""
    return text.strip().rstrip(".").strip().casefold()


def is_correct(text: str, item: Item) -> bool:
    """Returns whether the strict ``<answer>`` of ``text`` (``sparsectx.eval.extract``) is the answer."""
    answer = extract_answer(text).strict
    return answer is not None and normalize_answer(answer) == normalize_answer(item.answer)
