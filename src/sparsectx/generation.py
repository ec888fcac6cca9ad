"""Score a (pruned) context, and the decoding settings and records the decode engine uses.

Scoring gives teacher-forced logits/log-probs at response positions only (the LM head never runs on
the prompt). Generation itself is ``sparsectx.engine``: its one decode engine serves rollouts, evaluation,
Pass@K and the efficiency mode.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sparsectx.context import ContextBatch
from sparsectx.models.adapter import VLMAdapter


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
    honour_stops: bool = True
    """False = ignore end tokens and stop strings, always decode ``max_new_tokens`` (latency timing)."""

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"generation.max_new_tokens={self.max_new_tokens} must be >= 1")
        if self.do_sample and self.temperature <= 0:
            raise ValueError(f"generation.temperature={self.temperature} must be > 0 when do_sample=true")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"generation.top_p={self.top_p} must lie in (0, 1]")
        check_stop_strings(self.stop_strings)


def check_stop_strings(stop_strings: list[str]) -> None:
    """Raises ValueError naming ``stop_strings`` if one is empty (it would end every sample at once)."""
    empty = [i for i, s in enumerate(stop_strings) if not s]
    if empty:
        raise ValueError(f"stop_strings[{empty[0]}] is empty; an empty stop string ends every sample at once")


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

    def __post_init__(self) -> None:
        check_stop_strings(self.stop_strings)

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
