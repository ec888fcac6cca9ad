"""The one decode engine: static KV slots, continuous batching, on-device stops, CUDA-graph decode steps.

Rollouts, greedy evaluation, Pass@K sampling and the efficiency mode's latency all generate here. A call
gets prompts (``sparsectx.engine.prompts``), sorts them by context length, and fills ``slots`` slots with
the longest first; each prompt is prefilled with the model's own forward (its pruned tokens at their
unpruned M-RoPE positions, design invariant 3; prompts that share a context, ``Prompts.shared``, once per
refill) and its keys/values are copied into its slot, each layer with its own valid keys (after in-LLM
pruning layers >= K cache only the kept tokens; a hybrid decoder's linear-attention layers copy their
convolution and recurrent states instead, ``sparsectx.engine.hybrid_slots``); every decode step then
advances all slots at once at each slot's own next unpruned position. Tokens, counts and the ``done`` mask
stay on the device; every ``engine.sync_every`` steps the host reads them once, confirms the ends
(``sparsectx.engine.stops``), hands back finished generations and prefills the free slots with the next
prompts, so long answers never keep idle slots waiting. Greedy output equals the reference loop
(``tests/generation_oracle.py``) token for token.
"""

from __future__ import annotations

import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable

import torch
from transformers import DynamicCache, PreTrainedTokenizerBase

from sparsectx.engine.config import EngineConfig
from sparsectx.engine.hybrid_slots import slot_cache_for
from sparsectx.engine.prompts import Prompts
from sparsectx.engine.step import DecodeStep, weights_key
from sparsectx.engine.stops import StopCriteria, end_token_ids, generation_end_ids
from sparsectx.generation import Generation, SamplingConfig, choose_next
from sparsectx.models.adapter import VLMAdapter
from sparsectx.models.in_llm import layer_masks

OnFinish = Callable[[int, Generation], None]


class DecodeEngine:
    """Generates from prompts with one fixed-shape decode step per (slots, cache length) shape."""

    def __init__(self, adapter: VLMAdapter, tokenizer: PreTrainedTokenizerBase, cfg: EngineConfig) -> None:
        self.adapter, self.tokenizer, self.cfg = adapter, tokenizer, cfg
        self.device = adapter.model.device
        self.end_ids = end_token_ids(tokenizer, generation_end_ids(adapter.model))
        """Ids that end a turn: the tokenizer's and the model's generation config's (``stops``)."""
        self.graphs = cfg.graphs_on(self.device)
        self.compiled = cfg.compile_on(self.device)
        self._steps: OrderedDict[tuple[int, int, int], DecodeStep] = OrderedDict()

    def overlong(self, prompts: Prompts, cap: int) -> list[int]:
        """Returns the indices of the prompts that, with ``cap`` new tokens, need more cache positions than
        ``engine.max_length`` (``cache_positions``): a call holding one is refused (``shape``), so a caller with
        per-item results leaves them out and records why."""
        return [i for i, length in enumerate(prompts.lengths) if cache_positions(length, cap) > self.cfg.max_length]

    def shape(self, slots: int, longest: int, cap: int) -> tuple[int, int]:
        """Returns the (slots, cache length) a call uses; on CUDA rounded up to buckets so graphs are reused.

        Raises:
            ValueError: the prompts plus ``cap`` need more positions than ``engine.max_length``.
        """
        length = cache_positions(longest, cap)
        if length > self.cfg.max_length:
            raise ValueError(
                f"a {longest}-token prompt plus {cap} new tokens needs {length} cache positions, more than "
                f"engine.max_length={self.cfg.max_length}; raise it or lower max_new_tokens"
            )
        if not self.graphs:
            return slots, length
        bucket = next(b for b in self.cfg.slot_buckets if b >= slots)
        step = self.cfg.length_step
        return bucket, min(-(-length // step) * step, max(self.cfg.max_length, length))

    def step_for(self, slots: int, length: int, prefill: DynamicCache) -> DecodeStep:
        """Returns the decode step of this shape: a kept captured graph on CUDA, else a fresh one."""
        if not self.graphs:
            return DecodeStep(self.adapter, slot_cache_for(prefill, slots, length), False, self.compiled)
        key = (slots, length, weights_key(self.adapter.model))
        if key in self._steps:
            self._steps.move_to_end(key)
            return self._steps[key]
        while len(self._steps) >= self.cfg.graph_cache:
            self._steps.popitem(last=False)
        step = DecodeStep(self.adapter, slot_cache_for(prefill, slots, length), True, self.compiled)
        self._steps[key] = step
        return step

    @torch.no_grad()
    def generate(
        self,
        prompts: Prompts,
        sampling: SamplingConfig,
        generator: torch.Generator | None = None,
        slots: int | None = None,
        on_finish: OnFinish | None = None,
    ) -> list[Generation]:
        """Returns one ``Generation`` per prompt, in prompt order, decoding ``slots`` prompts at a time.

        Args:
            prompts: what to generate from.
            sampling: greedy or sampling settings, the length cap and the stop strings.
            generator: the sampler's generator (unused when greedy).
            slots: sequences decoded at once (default: all prompts, up to ``engine.max_slots``).
            on_finish: called with (prompt index, generation) as each one finishes.
        """
        if len(prompts) == 0:
            return []
        if slots is not None:
            self.cfg.check_slots(slots, "slots")
        slots = min(slots or self.cfg.max_slots, len(prompts))
        run = _Run(self, prompts, sampling, generator, slots, on_finish)
        run.fill()
        while run.busy():
            run.advance(self.cfg.sync_every)
            run.collect()
            run.fill()
        return run.results

    @torch.no_grad()
    def time_stages(self, prompts: Prompts, steps: int) -> tuple[float, float]:
        """Returns (prefill, decode) seconds of one prompt: its prefill, then ``steps`` greedy decode steps.

        Stops are ignored so every call decodes the same number of tokens (the efficiency mode's latency).
        """
        sampling = SamplingConfig(steps, False, 1.0, 1.0, 0, [], honour_stops=False)
        run = _Run(self, prompts, sampling, None, 1, None)
        start = _synced(self.device)
        run.fill()
        prefilled = _synced(self.device)
        run.advance(steps)
        return prefilled - start, _synced(self.device) - prefilled

    @torch.no_grad()
    def time_replay(self, prompts: Prompts, reference: torch.Tensor) -> tuple[float, float, torch.Tensor]:
        """Returns (prefill, decode) seconds of one prompt replaying ``reference`` by teacher forcing, and the
        model's greedy choice at each of the reference's n positions, (n,) on the device.

        The prefill gives the first position's logits; then n - 1 incremental forwards, the i-th fed reference
        token i - 1 (LT-OPD App. E.1: a 128-token reference, 127 forwards). ``reference`` (n,) may be on the
        CPU: its copy to the device is timed with the decode.
        """
        steps = reference.shape[0]
        sampling = SamplingConfig(steps, False, 1.0, 1.0, 0, [], honour_stops=False)
        run = _Run(self, prompts, sampling, None, 1, None)
        start = _synced(self.device)
        run.fill()
        prefilled = _synced(self.device)
        chosen = run.replay(reference.to(self.device))
        return prefilled - start, _synced(self.device) - prefilled, chosen


def cache_positions(length: int, cap: int) -> int:
    """Returns the cache positions one slot needs for a ``length``-token prompt and ``cap`` new tokens (one more:
    the step writing past the cap)."""
    return length + cap + 1


def shared_rows(prompts: Prompts, taken: list[int]) -> tuple[list[int], list[int]]:
    """Returns (prompts to prefill, the prefill row of each taken prompt): one row per distinct context."""
    first: dict[int, int] = {}
    unique, source = [], []
    for index in taken:
        key = prompts.context_key(index)
        if key not in first:
            first[key] = len(unique)
            unique.append(index)
        source.append(first[key])
    return unique, source


def prefill_groups(lengths: list[int], budget: int) -> list[list[int]]:
    """Returns the rows ``0 .. len(lengths) - 1`` in order, split into runs whose padded prefill (rows x the run's
    longest prompt) stays within ``budget`` tokens; a prompt longer than ``budget`` is a run of its own.

    A prefill's activations and its full-width cache grow with the padded tokens of one forward: 256 slots of
    1,356-token contexts are 347K tokens at once, more than an 80 GB GPU holds beside a 7B model. The queue is
    sorted longest first, so each run pads little."""
    groups: list[list[int]] = []
    longest = 0
    for row, length in enumerate(lengths):
        if groups and (len(groups[-1]) + 1) * max(longest, length) <= budget:
            groups[-1].append(row)
            longest = max(longest, length)
        else:
            groups.append([row])
            longest = length
    return groups


def _synced(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


class _Run:
    """The state of one ``generate`` call: the queue, each slot's occupant and the device-side counters."""

    def __init__(
        self,
        engine: DecodeEngine,
        prompts: Prompts,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
        slots: int,
        on_finish: OnFinish | None,
    ) -> None:
        self.engine, self.prompts, self.sampling, self.generator = engine, prompts, sampling, generator
        self.on_finish = on_finish
        self.queue = deque(sorted(range(len(prompts)), key=lambda i: -prompts.lengths[i]))
        self.usable = slots
        self.slots, self.length = engine.shape(slots, max(prompts.lengths), sampling.max_new_tokens)
        self.stops = StopCriteria(engine.tokenizer, sampling.stop_strings, engine.device, engine.end_ids)
        self.step: DecodeStep | None = None
        self.occupant: list[int | None] = [None] * self.slots
        self.checked = [0] * self.slots
        self.results: list[Generation] = [None] * len(prompts)  # type: ignore[list-item]
        device, cap = engine.device, sampling.max_new_tokens
        self.history = torch.zeros(self.slots, cap + 1, dtype=torch.long, device=device)  # column cap: scratch
        self.count = torch.zeros(self.slots, dtype=torch.long, device=device)
        self.done = torch.ones(self.slots, dtype=torch.bool, device=device)

    def busy(self) -> bool:
        """Returns whether any slot is occupied."""
        return any(o is not None for o in self.occupant)

    def fill(self) -> None:
        """Prefills the free slots with the next prompts in the queue: one batched forward per group of at most
        ``engine.prefill_tokens`` padded tokens (``prefill_groups``), one row per distinct context."""
        free = [s for s in range(self.usable) if self.occupant[s] is None][: len(self.queue)]
        if not free:
            return
        taken = [self.queue.popleft() for _ in free]
        unique, source = shared_rows(self.prompts, taken)
        lengths = [self.prompts.lengths[i] for i in unique]
        for group in prefill_groups(lengths, self.engine.cfg.prefill_tokens):
            first = group[0]
            members = [k for k, row in enumerate(source) if first <= row <= group[-1]]
            self.prefill(
                [unique[row] for row in group],
                [free[k] for k in members],
                [taken[k] for k in members],
                [source[k] - first for k in members],
            )

    def prefill(self, rows: list[int], slots: list[int], taken: list[int], source: list[int]) -> None:
        """Prefills the prompts ``rows`` in one forward and loads them into ``slots``, slot i taking prompt
        ``taken[i]`` from prefill row ``source[i]`` (several slots may share a row: copies of one context)."""
        engine = self.engine
        ctx = self.prompts.build(rows)
        prefill = DynamicCache(config=engine.adapter.model.config.get_text_config())
        hidden = engine.adapter.run_llm(ctx.inputs, prefill)
        logits = engine.adapter.logits(hidden[:, -1])
        if self.step is None:
            self.step = engine.step_for(self.slots, self.length, prefill)
        src = None if source == list(range(len(rows))) else torch.tensor(source, device=engine.device)
        pick = (lambda t: t) if src is None else (lambda t: t.index_select(0, src))  # noqa: E731
        masks = layer_masks(ctx.inputs, len(self.step.cache.keys))
        self.step.cache.load(slots, prefill, masks, src)
        index = torch.tensor(slots, dtype=torch.long, device=engine.device)
        self.step.logits[index] = pick(logits).to(self.step.logits.dtype)
        self.step.positions[index] = pick(ctx.next_position.to(engine.device))
        self.count[index] = 0
        self.done[index] = False
        for slot, prompt in zip(slots, taken, strict=True):
            self.occupant[slot], self.checked[slot] = prompt, 0

    def advance(self, steps: int) -> None:
        """Runs ``steps`` decode steps on every slot without a host sync."""
        cap, step = self.sampling.max_new_tokens, self.step
        for _ in range(steps):
            tokens = choose_next(step.logits, self.sampling, self.generator)
            live = ~self.done
            self.history.scatter_(1, self.count.clamp(max=cap)[:, None], tokens[:, None])
            self.count += live
            ended = self.count >= cap
            if self.sampling.honour_stops:
                ended |= self.stops.matches(self.history, self.count, tokens)
            self.done |= live & ended
            step.tokens.copy_(tokens)
            step.run()

    def replay(self, reference: torch.Tensor) -> torch.Tensor:
        """Teacher-forces ``reference`` (n,) into slot 0 after its prefill: n - 1 decode steps, the i-th fed token
        i - 1. Returns the (n,) greedy choices at the n positions (the prefill's logits, then each step's)."""
        step = self.step
        chosen = torch.empty_like(reference)
        chosen[0] = choose_next(step.logits, self.sampling, None)[0]
        for i in range(1, reference.shape[0]):
            step.tokens[0] = reference[i - 1]
            step.run()
            chosen[i] = choose_next(step.logits, self.sampling, None)[0]
        return chosen

    def collect(self) -> None:
        """Reads the slots once; hands back every finished generation (ends placed by the host rule)."""
        done, count = self.done.tolist(), self.count.tolist()
        widest = max(count)
        history = self.history[:, :widest].cpu().tolist()
        for slot, index in enumerate(self.occupant):
            if index is None:
                continue
            ids = history[slot][: count[slot]]
            end = self.stops.text_ends(ids, self.checked[slot]) if self.sampling.honour_stops else None
            if end is None and not done[slot]:
                self.checked[slot] = count[slot]
                continue
            length = count[slot] if end is None else end + 1
            self._finish(slot, index, ids[:length], stopped=end is not None)

    def _finish(self, slot: int, index: int, ids: list[int], stopped: bool) -> None:
        out = Generation(
            token_ids=torch.tensor(ids, dtype=torch.long),
            text=self.engine.tokenizer.decode(ids, skip_special_tokens=True),
            stopped=stopped,
        )
        self.results[index] = out
        self.occupant[slot] = None
        self.done[slot] = True
        if self.on_finish is not None:
            self.on_finish(index, out)


_ENGINES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def engine_for(adapter: VLMAdapter, tokenizer: PreTrainedTokenizerBase, cfg: EngineConfig) -> DecodeEngine:
    """Returns the model's engine (kept with the model so captured graphs outlive one call), made on first use.

    A different ``EngineConfig`` replaces the kept engine.
    """
    engine = _ENGINES.get(adapter.model)
    if engine is None or engine.cfg != cfg or engine.adapter is not adapter or engine.tokenizer is not tokenizer:
        engine = DecodeEngine(adapter, tokenizer, cfg)
        _ENGINES[adapter.model] = engine
    return engine
