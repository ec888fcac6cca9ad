"""The reference decode loop, kept as the test oracle of ``sparsectx.engine`` (not used by the library).

It is the project's generation loop before the engine: a DynamicCache, one Python step per token, the
left-padded 2D mask grown every step, and stop strings looked for in the decoded text of each sample's last
16 tokens at every step. The engine must give the same greedy tokens, stop positions and texts.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, PreTrainedTokenizerBase

from sparsectx.context import ContextBatch
from sparsectx.engine.stops import end_token_ids, generation_end_ids
from sparsectx.generation import Generation, SamplingConfig, choose_next
from sparsectx.models.adapter import LLMInputs, VLMAdapter


def _step_inputs(adapter: VLMAdapter, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> LLMInputs:
    embeds = adapter.embed_ids(tokens[:, None])
    visual = torch.zeros(tokens.shape[0], 1, dtype=torch.bool, device=tokens.device)
    return LLMInputs(embeds, mask, positions[None, :, None].expand(3, -1, 1), visual, ())


@torch.no_grad()
def reference_generate(
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
    ends = end_token_ids(tokenizer, generation_end_ids(adapter.model))
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
