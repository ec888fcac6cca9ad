"""When a generation ends: end-of-turn ids and stop strings, checked on the device and confirmed on the host.

The rule is the reference loop's (``tests/generation_oracle.py``): a sample ends at the first token that is an
end-of-turn id, or after which the decoded text of its last ``WINDOW`` tokens contains a stop string; that
token is kept. On the device each stop string is a few token-id sequences (its canonical tokenisation and
the ones it gets after a space, a newline or punctuation), matched against the tail of every slot each step,
so no text is decoded per token. Rarer tokenisations are caught on the host at the next sync, from one decode
of each slot's recent tokens, and ``cut`` places every end exactly where the reference loop puts it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

WINDOW = 16
"""Tokens of text the reference rule decodes to look for a stop string (the reference loop's window)."""

CONTEXTS = ("", " ", "\n", "\n\n", ".", ")", ">", "a", "1")
"""Text a stop string is tokenised after, to collect the id sequences it takes in running text."""


def generation_end_ids(model: PreTrainedModel) -> set[int]:
    """Returns the ids the model's ``generation_config`` ends generation at (one id or a list), as HF
    ``generate`` stops: GLM-4.6V's lists its turn ends ``<|user|>`` and ``<|observation|>`` beside its eos."""
    config = getattr(model, "generation_config", None)
    eos = None if config is None else config.eos_token_id
    if eos is None:
        return set()
    return {int(eos)} if isinstance(eos, int) else {int(i) for i in eos}


def end_token_ids(tokenizer: PreTrainedTokenizerBase, extra: Iterable[int] = ()) -> set[int]:
    """Returns the ids that end a turn: the tokenizer's eos, ``<|im_end|>`` when present, and ``extra`` (the
    model's ``generation_end_ids``)."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    ids.update(extra)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if isinstance(im_end, int) and im_end != tokenizer.unk_token_id:
        ids.add(im_end)
    return ids


def stop_sequences(tokenizer: PreTrainedTokenizerBase, stop: str) -> list[list[int]]:
    """Returns the distinct shortest id sequences whose decoded text contains ``stop``, one per context.

    Raises:
        ValueError: ``stop`` tokenises to nothing (an empty stop string would end every sample at once).
    """
    out: list[list[int]] = []
    for context in CONTEXTS:
        ids = tokenizer(context + stop, add_special_tokens=False).input_ids
        if not ids:
            raise ValueError(f"stop string {stop!r} tokenises to no tokens; remove it from stop_strings")
        for start in range(len(ids) - 1, -1, -1):
            if stop in tokenizer.decode(ids[start:], skip_special_tokens=False):
                if ids[start:] not in out:
                    out.append(ids[start:])
                break
    return out


class StopCriteria:
    """The end ids and stop-string id sequences of one generation call, as device tensors."""

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        stop_strings: Sequence[str],
        device: torch.device,
        end_ids: Iterable[int],
    ) -> None:
        self.tokenizer = tokenizer
        self.stop_strings = list(stop_strings)
        self.end_ids = sorted(end_ids)
        sequences = [seq for stop in self.stop_strings for seq in stop_sequences(tokenizer, stop)]
        self.width = max((len(s) for s in sequences), default=0)
        padded = torch.full((len(sequences), max(self.width, 1)), -1, dtype=torch.long)
        for row, seq in enumerate(sequences):
            padded[row, self.width - len(seq) :] = torch.tensor(seq)
        self.sequences = padded.to(device)  # right-aligned; -1 marks positions a shorter sequence ignores
        self.ends = torch.tensor(self.end_ids or [-1], dtype=torch.long, device=device)

    def matches(self, history: torch.Tensor, counts: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """Returns (B,) bool: the newest token ends its sample (end id, or a stop sequence just completed).

        Args:
            history: (B, C) generated ids per slot (valid up to ``counts``).
            counts: (B,) generated tokens per slot, the newest included.
            tokens: (B,) the newest token of each slot.
        """
        ended = torch.isin(tokens, self.ends)
        if self.width == 0:
            return ended
        offsets = torch.arange(self.width, device=history.device) - self.width
        index = counts[:, None] + offsets[None, :]
        tail = history.gather(1, index.clamp(min=0))
        tail = tail.masked_fill(index < 0, -2)  # before the first token: matches no real id
        care = self.sequences >= 0
        hit = ((tail[:, None, :] == self.sequences[None]) | ~care[None]).all(dim=-1).any(dim=-1)
        return ended | hit

    def text_ends(self, ids: Sequence[int], start: int = 0) -> int | None:
        """Returns the index of the first token at or after ``start`` that ends the sample, or None.

        The reference rule, applied on the host: an end id, or a stop string in the decoded text of the
        last ``WINDOW`` tokens up to it. One decode of ``ids`` is tried first; only when it holds a stop
        string are the tokens scanned one by one.
        """
        ids = list(ids)
        ends = set(self.end_ids)
        first_end = next((j for j in range(start, len(ids)) if ids[j] in ends), None)
        stop_limit = len(ids) if first_end is None else first_end
        text = self.tokenizer.decode(ids[max(0, start - WINDOW + 1) : stop_limit], skip_special_tokens=False)
        if not any(stop in text for stop in self.stop_strings):
            return first_end
        for j in range(start, stop_limit):
            window = self.tokenizer.decode(ids[max(0, j - WINDOW + 1) : j + 1], skip_special_tokens=False)
            if any(stop in window for stop in self.stop_strings):
                return j
        return first_end
