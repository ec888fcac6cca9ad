"""Score and generate on a (pruned) context.

Scoring gives teacher-forced logits/log-probs at response positions only (the LM head never runs on
the prompt). Generation is a KV-cached loop over explicit positions, so decoding continues at the
unpruned model's positions whatever was pruned.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedTokenizerBase

from sparsectx.context import ContextBatch
from sparsectx.models.adapter import LLMInputs, VLMAdapter


@dataclass
class SamplingConfig:
    """Decoding settings (``generation`` block of a benchmark or method config)."""

    max_new_tokens: int
    """Most tokens generated per sample."""
    do_sample: bool
    """False = greedy; True = sample with temperature / top-p / top-k."""
    temperature: float
    """Softmax temperature when sampling."""
    top_p: float
    """Nucleus mass kept when sampling (1.0 = off)."""
    top_k: int
    """Most-likely tokens kept when sampling (0 = off)."""
    stop_strings: list[str]
    """Generation of a sample ends once its text contains any of these (kept in the output)."""

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"generation.max_new_tokens={self.max_new_tokens} must be >= 1")
        if self.do_sample and self.temperature <= 0:
            raise ValueError(f"generation.temperature={self.temperature} must be > 0 when do_sample=true")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"generation.top_p={self.top_p} must lie in (0, 1]")


@dataclass
class DecodingConfig:
    """Decoding settings without the length cap (benchmark, Pass@K and rollout configs supply the cap)."""

    do_sample: bool
    """False = greedy."""
    temperature: float
    """Softmax temperature when sampling."""
    top_p: float
    """Nucleus mass kept when sampling (1.0 = off)."""
    top_k: int
    """Most likely tokens kept when sampling (0 = off)."""
    stop_strings: list[str]
    """Generation ends once the text contains one of these (the seeds stop at ``</answer>``)."""

    def sampling(self, max_new_tokens: int) -> SamplingConfig:
        """Returns the ``SamplingConfig`` of these settings with the given cap."""
        return SamplingConfig(
            max_new_tokens, self.do_sample, self.temperature, self.top_p, self.top_k, list(self.stop_strings)
        )


@dataclass
class Generation:
    """One generated response.

    Attributes:
        token_ids: (T,) int64 generated ids, up to and including the stop token/string.
        text: decoded text (special tokens removed).
        stopped: True if a stop string or end-of-turn token ended it (False = hit max_new_tokens).
    """

    token_ids: torch.Tensor
    text: str
    stopped: bool


def response_hidden(adapter: VLMAdapter, batch: ContextBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (B, T, D) hidden states that predict each response token, and the (B, T) bool validity mask.

    Position j of sample b holds the state at slot prompt_end[b] - 1 + j, i.e. the one whose
    next-token distribution scores response token j.
    """
    hidden = adapter.run_llm(batch.inputs, cache=None)
    width = int(batch.response_lengths.max()) if batch.response_lengths.numel() else 0
    steps = torch.arange(width, device=hidden.device)
    mask = steps[None, :] < batch.response_lengths[:, None]
    index = (batch.prompt_end[:, None] - 1 + steps[None, :]).clamp(max=hidden.shape[1] - 1)
    picked = torch.gather(hidden, 1, index[..., None].expand(-1, -1, hidden.shape[-1]))
    return picked, mask


def response_logits(adapter: VLMAdapter, batch: ContextBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (B, T, V) logits predicting each response token and the (B, T) validity mask."""
    hidden, mask = response_hidden(adapter, batch)
    return adapter.logits(hidden), mask


def response_logprobs(
    adapter: VLMAdapter, batch: ContextBatch, responses: list[torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (B, T) fp32 log-probabilities of the given response tokens (0 where masked) and the mask."""
    logits, mask = response_logits(adapter, batch)
    target = torch.zeros(mask.shape, dtype=torch.long, device=logits.device)
    for b, r in enumerate(responses):
        target[b, : r.numel()] = r
    logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, target[..., None]).squeeze(-1)
    return logp * mask, mask


def choose_next(logits: torch.Tensor, cfg: SamplingConfig, generator: torch.Generator | None) -> torch.Tensor:
    """Returns (B,) next tokens from (B, V) logits: argmax, or a sample after temperature/top-k/top-p."""
    if not cfg.do_sample:
        return logits.argmax(dim=-1)
    scores = logits.float() / cfg.temperature
    if cfg.top_k > 0:
        kth = torch.topk(scores, min(cfg.top_k, scores.shape[-1]), dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if cfg.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=True, dim=-1)
        cumulative = torch.softmax(sorted_scores, dim=-1).cumsum(dim=-1)
        drop_sorted = cumulative - torch.softmax(sorted_scores, dim=-1) >= cfg.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        scores = scores.masked_fill(drop, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def end_token_ids(tokenizer: PreTrainedTokenizerBase) -> set[int]:
    """Returns the ids that end a turn: the tokenizer's eos and ``<|im_end|>`` when present."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if isinstance(im_end, int) and im_end != tokenizer.unk_token_id:
        ids.add(im_end)
    return ids


def _step_inputs(adapter: VLMAdapter, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> LLMInputs:
    embeds = adapter.embed_ids(tokens[:, None])
    visual = torch.zeros(tokens.shape[0], 1, dtype=torch.bool, device=tokens.device)
    return LLMInputs(embeds, mask, positions[None, :, None].expand(3, -1, 1), visual, ())


@torch.no_grad()
def generate(
    adapter: VLMAdapter,
    tokenizer: PreTrainedTokenizerBase,
    batch: ContextBatch,
    cfg: SamplingConfig,
    generator: torch.Generator | None,
) -> list[Generation]:
    """Returns one ``Generation`` per sample, decoded with a KV cache from the batch's (pruned) context."""
    cache = DynamicCache(config=adapter.model.config.get_text_config())
    hidden = adapter.run_llm(batch.inputs, cache)
    logits = adapter.logits(hidden[:, -1])
    mask = batch.inputs.attention_mask
    positions = batch.next_position.clone()
    ends = end_token_ids(tokenizer)
    size = logits.shape[0]
    out: list[list[int]] = [[] for _ in range(size)]
    done = [False] * size
    stopped = [False] * size
    for _ in range(cfg.max_new_tokens):
        tokens = choose_next(logits, cfg, generator)
        for b, tok in enumerate(tokens.tolist()):
            if done[b]:
                continue
            out[b].append(tok)
            text = tokenizer.decode(out[b][-16:], skip_special_tokens=False)
            if tok in ends or any(s in text for s in cfg.stop_strings):
                done[b] = stopped[b] = True
        if all(done):
            break
        mask = torch.cat([mask, mask.new_ones(size, 1)], dim=1)
        hidden = adapter.run_llm(_step_inputs(adapter, tokens, positions, mask), cache)
        logits = adapter.logits(hidden[:, -1])
        positions = positions + 1
    return [
        Generation(
            token_ids=torch.tensor(ids, dtype=torch.long),
            text=tokenizer.decode(ids, skip_special_tokens=True),
            stopped=stop,
        )
        for ids, stop in zip(out, stopped, strict=True)
    ]
