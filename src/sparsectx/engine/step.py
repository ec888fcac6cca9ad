"""One decode step over every slot of a ``SlotCache``: eager, or captured once as a CUDA graph and replayed.

The step reads its inputs from fixed buffers (each slot's last token and its unpruned next position), writes
the new keys/values at each slot's write index, advances index and position, and leaves (B, V) logits in a
fixed output buffer. Captured, it is one graph launch per token for the whole batch; the graph holds
pointers to the model's weights, so it is captured again whenever the parameters are re-allocated
(``weights_key``), never when they are only updated in place (optimizer steps, EMA swaps). The model's part
of the step (embedding, decoder layers, LM head) can go through ``torch.compile`` first (``engine.compile``):
inductor fuses the norms, rotary and activation products that otherwise run as many small kernels, and the
graph then captures the fused kernels.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from sparsectx.engine.slots import SlotCache, decode_attention
from sparsectx.models.adapter import LLMInputs, VLMAdapter

WARMUP_STEPS = 2
"""Eager steps run on a side stream before capture (lazy allocations and kernel choices happen there)."""


def weights_key(model: torch.nn.Module) -> int:
    """Returns a hash of where the model's parameters live: it changes when a graph's pointers go stale."""
    return hash(tuple((p.data_ptr(), p.dtype) for p in model.parameters()))


def model_step(
    adapter: VLMAdapter, cache: SlotCache, tokens: torch.Tensor, positions: torch.Tensor, visual: torch.Tensor
) -> torch.Tensor:
    """Returns the (B, V) next-token logits of each slot's token at its position, writing its keys/values."""
    embeds = adapter.embed_ids(tokens[:, None])
    inputs = LLMInputs(embeds, cache.attention_mask(), positions.view(1, -1, 1).expand(3, -1, 1), visual, ())
    hidden = adapter.run_llm(inputs, cache)
    return adapter.logits(hidden[:, -1])


@functools.cache
def compiled_model_step() -> Callable[..., torch.Tensor]:
    """Returns ``model_step`` through inductor, compiled on first call: one shape specialised, later ones
    dynamic. Made on first use: ``torch.compile`` imports inductor (~0.5 s), which a CPU job never needs."""
    return torch.compile(model_step)


class DecodeStep:
    """The fixed-shape decode step of one slot cache; ``run`` advances every slot by one token."""

    def __init__(self, adapter: VLMAdapter, cache: SlotCache, capture: bool, compiled: bool) -> None:
        self.adapter, self.cache = adapter, cache
        self._model_step = compiled_model_step() if compiled else model_step
        device = cache.valid.device
        self.tokens = torch.zeros(cache.slots, dtype=torch.long, device=device)
        self.positions = torch.zeros(cache.slots, dtype=torch.long, device=device)
        self._visual = torch.zeros(cache.slots, 1, dtype=torch.bool, device=device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.logits = self._forward()
        self._reset()
        if capture:
            self._capture()

    def _forward(self) -> torch.Tensor:
        """Runs the model on each slot's token at its position; returns the (B, V) next-token logits."""
        cache, adapter = self.cache, self.adapter
        cache.mark_written()
        with decode_attention(adapter.model.config.get_text_config()):
            logits = self._model_step(adapter, cache, self.tokens, self.positions, self._visual)
        cache.write_index.add_(1).clamp_(max=cache.length - 1)
        self.positions.add_(1)
        return logits

    def _capture(self) -> None:
        """Warms the step up on a side stream, captures it as a CUDA graph, then clears the slot state.

        Warm-up and capture run under one autocast state: a compiled step guards on it, and a recompile
        inside the capture would launch inductor's autotuning benchmarks there and invalidate the graph.
        """
        device = self.tokens.device
        autocast = torch.is_autocast_enabled(device.type)
        dtype = torch.get_autocast_dtype(device.type)

        def capture_autocast() -> torch.autocast:
            # An autocast weight cache would hold tensors made during capture; graphs need it off.
            return torch.autocast(device.type, dtype=dtype, enabled=autocast, cache_enabled=False)

        side = torch.cuda.Stream(device=device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side), capture_autocast():
            for _ in range(WARMUP_STEPS):
                self._forward()
        torch.cuda.current_stream(device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with capture_autocast(), torch.cuda.graph(self.graph):
            self.logits = self._forward()
        self._reset()

    def _reset(self) -> None:
        self.cache.clear()
        self.positions.zero_()
        self.tokens.zero_()

    def run(self) -> None:
        """Advances every slot by one token; the logits land in ``self.logits`` (overwritten by the next run)."""
        if self.graph is not None:
            self.graph.replay()
        else:
            self.logits = self._forward()
