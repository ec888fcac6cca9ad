"""One decode step over every slot of a ``SlotCache``: eager, or captured once as a CUDA graph and replayed.

The step reads its inputs from fixed buffers (each slot's last token and its unpruned next position), writes
the new keys/values at each slot's write index, advances index and position, and leaves (B, V) logits in a
fixed output buffer. Captured, it is one graph launch per token for the whole batch; the graph holds
pointers to the model's weights, so it is captured again whenever the parameters are re-allocated
(``weights_key``), never when they are only updated in place (optimizer steps, EMA swaps). The model's part
of the step (embedding, decoder layers, LM head) can go through ``torch.compile`` first (``engine.compile``):
inductor fuses the norms, rotary and activation products that otherwise run as many small kernels, and the
graph then captures the fused kernels.

Attention reads only the first ``span`` cache positions (``SlotCache.span``): the engine passes each step the
widest key position an occupied slot will attend, and the step rounds it up to one of its spans (``span_buckets``:
``engine.length_step`` doubling up to the cache length), so a few graphs, captured together and sharing one memory
pool, serve a call while its slots grow from their prompts towards the cap. The keys beyond a slot's own end are
masked either way; reading fewer of them changes nothing but the bytes read.
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


def span_buckets(length: int, step: int | None) -> list[int]:
    """Returns the attention spans a step over a ``length``-position cache runs at, ascending: ``step``, ``2 step``,
    ``4 step``, ... below ``length``, then ``length`` (only ``length`` when ``step`` is None). Doubling keeps the
    graphs few (log2 of length / step) while a step never reads more than twice the keys it needs."""
    spans = []
    span = step or length
    while span < length:
        spans.append(span)
        span *= 2
    return [*spans, length]


class DecodeStep:
    """The fixed-shape decode step of one slot cache; ``run`` advances every slot by one token."""

    def __init__(
        self, adapter: VLMAdapter, cache: SlotCache, capture: bool, compiled: bool, span_step: int | None = None
    ) -> None:
        """Builds the step (and on ``capture`` its CUDA graphs, one per span of ``span_buckets(cache.length,
        span_step)``); ``span_step`` None attends the whole cache at every step."""
        self.adapter, self.cache = adapter, cache
        self._model_step = compiled_model_step() if compiled else model_step
        device = cache.valid.device
        self.tokens = torch.zeros(cache.slots, dtype=torch.long, device=device)
        self.positions = torch.zeros(cache.slots, dtype=torch.long, device=device)
        self._visual = torch.zeros(cache.slots, 1, dtype=torch.bool, device=device)
        self.spans = span_buckets(cache.length, span_step)
        self._graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.logits = self._forward(cache.length)
        self._reset()
        if capture:
            pool = torch.cuda.graph_pool_handle()
            for span in self.spans:
                self._capture(span, pool)
            self._reset()

    def span_for(self, needed: int) -> int:
        """Returns the smallest span that covers key positions ``[0, needed)``."""
        return next((span for span in self.spans if span >= needed), self.spans[-1])

    def _forward(self, span: int) -> torch.Tensor:
        """Runs the model on each slot's token at its position, attending the first ``span`` cache positions;
        returns the (B, V) next-token logits."""
        cache, adapter = self.cache, self.adapter
        cache.span = span
        cache.mark_written()
        with decode_attention(adapter.model.config.get_text_config()):
            logits = self._model_step(adapter, cache, self.tokens, self.positions, self._visual)
        cache.write_index.add_(1).clamp_(max=cache.length - 1)
        self.positions.add_(1)
        return logits

    def _capture(self, span: int, pool: tuple[int, int]) -> None:
        """Warms the ``span`` step up on a side stream and captures it as a CUDA graph in the shared ``pool``.

        Warm-up writes into the slot cache, which the caller clears after the last capture. The graphs of one
        step never replay concurrently and each keeps its own output, so they can share one memory pool. Warm-up
        and capture run under one autocast state: a compiled step guards on it, and a recompile inside the
        capture would launch inductor's autotuning benchmarks there and invalidate the graph.
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
                self._forward(span)
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with capture_autocast(), torch.cuda.graph(graph, pool=pool):
            logits = self._forward(span)
        self._graphs[span] = (graph, logits)

    def _reset(self) -> None:
        self.cache.clear()
        self.positions.zero_()
        self.tokens.zero_()

    def run(self, needed: int | None = None) -> None:
        """Advances every slot by one token, attending key positions ``[0, needed)`` rounded up to a span (None:
        the whole cache); the logits land in ``self.logits`` (overwritten by the next run).

        ``needed`` must exceed every occupied slot's write index (``_Run`` tracks them on the host): keys from
        there on are outside the span."""
        span = self.span_for(needed or self.cache.length)
        if self._graphs:
            graph, self.logits = self._graphs[span]
            graph.replay()
        else:
            self.logits = self._forward(span)
