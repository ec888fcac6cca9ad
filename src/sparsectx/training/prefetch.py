"""The next step's host inputs (decoded images, processor tensors), prepared while this step runs.

A step's images cost CPU before the GPU can start: at 7B, 32 images of 1,296 tokens take ~0.65 s to decode,
resize, normalise and patchify, with the GPU idle (``scripts/bench_train_step.py --profile``). With
``prefetch_host_inputs`` one background thread builds step t+1's prompts and processor batch while step t
decodes its rollouts and backpropagates (PIL and numpy release the GIL; the GPU phases mostly wait on the
device). Host inputs are a pure function of the items, their sample positions and the config, so a
prefetched batch is the batch an on-demand call would build; a request for positions nobody prefetched
(the first step, a resume) builds on demand. A failure in the thread (an unreadable image) is raised by
the step that asks for that batch, the same error an on-demand build raises.

The thread tokenizes with its own copy of the tokenizer. A fast tokenizer's padding and truncation are state
of its one Rust object, set by every call: a step that tokenizes reference answers (``padding`` off) while the
thread tokenizes a padded batch could switch padding off between the thread's setting and its encoding, and
the batch came out ragged ("Unable to create tensor", seen once in 40 steps of SFT on the GPU).
"""

from __future__ import annotations

import copy
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from transformers import BatchFeature

from sparsectx.data import Item
from sparsectx.models.processor import ImageTextProcessor
from sparsectx.prompting import PromptItem, build_prompts, processor_inputs
from sparsectx.training.batches import prompt_item
from sparsectx.training.config import TrainConfig

Batch = tuple[list[Item], list[int]]
"""One micro-batch: its items and their global sample positions."""


@dataclass
class HostInputs:
    """One micro-batch's prompts and its processor output (``pixel_values`` pinned when prefetched on CUDA)."""

    prompts: list[PromptItem]
    batch: BatchFeature


def host_inputs(cfg: TrainConfig, processor: ImageTextProcessor, batch: Batch, pin: bool) -> HostInputs:
    """Returns the micro-batch's prompts (images decoded) and processor tensors, built on the CPU."""
    items, positions = batch
    build = lambda pair: prompt_item(pair[0], cfg.train_data, pair[1])  # noqa: E731
    prompts = build_prompts(build, list(zip(items, positions, strict=True)), processor.image_workers)
    features = processor_inputs(processor, prompts)
    if pin and "pixel_values" in features:  # page-locked: the copy to the GPU runs asynchronously
        features["pixel_values"] = features["pixel_values"].pin_memory()
    return HostInputs(prompts, features)


@dataclass
class HostPrefetch:
    """A one-thread builder of the next step's host inputs, keyed by their sample positions."""

    _pool: ThreadPoolExecutor | None = None
    _pending: dict[tuple[int, ...], Future[HostInputs]] = field(default_factory=dict)
    _own: tuple[ImageTextProcessor, ImageTextProcessor] | None = None
    """(the caller's processor, the thread's copy of it with a tokenizer of its own)."""

    def thread_processor(self, processor: ImageTextProcessor) -> ImageTextProcessor:
        """Returns the thread's copy of ``processor``: the same image processor, its own tokenizer object."""
        if self._own is None or self._own[0] is not processor:
            own = copy.copy(processor)
            own.tokenizer = copy.deepcopy(processor.tokenizer)
            self._own = (processor, own)
        return self._own[1]

    def take(self, cfg: TrainConfig, processor: ImageTextProcessor, batch: Batch) -> HostInputs:
        """Returns the micro-batch's host inputs: the prefetched ones if its positions were submitted."""
        future = self._pending.pop(tuple(batch[1]), None)
        if future is None:
            return host_inputs(cfg, processor, batch, pin=False)
        return future.result()

    def submit(self, cfg: TrainConfig, processor: ImageTextProcessor, batches: list[Batch], pin: bool) -> None:
        """Returns None after queueing ``batches`` (the next step's) for the thread; drops older entries."""
        for future in self._pending.values():
            future.cancel()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="host-prefetch")
        own = self.thread_processor(processor)
        self._pending = {tuple(batch[1]): self._pool.submit(host_inputs, cfg, own, batch, pin) for batch in batches}

    def close(self) -> None:
        """Returns None after dropping queued work and stopping the thread (a running build finishes)."""
        for future in self._pending.values():
            future.cancel()
        self._pending = {}
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
