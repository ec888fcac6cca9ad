"""Engine settings (the ``engine`` config group, ``conf/engine/default.yaml``), checked on construction."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sparsectx.checks import check_choice


@dataclass
class EngineConfig:
    """How the one decode engine batches, syncs and replays its decode step."""

    cuda_graphs: str
    """``auto`` (on when the model is on CUDA), ``on`` (a config error off CUDA) or ``off``."""
    compile: str
    """``auto`` (on when the step is captured as a CUDA graph), ``on`` or ``off``: torch.compile the step."""
    sync_every: int
    """Decode steps between host syncs: finished slots are read, checked and refilled only then."""
    max_slots: int
    """Most sequences decoded at once; a larger batch is a config error, not a silent split."""
    max_length: int
    """Most cache positions per slot (prompt + generated tokens)."""
    slot_buckets: list[int]
    """On CUDA the slot count is rounded up to the next bucket, so a few captured graphs serve every batch."""
    length_step: int
    """On CUDA the cache length is rounded up to a multiple of this, for the same reason."""
    graph_cache: int
    """Captured (slots, length) graphs kept per model; the oldest goes first (each holds its KV cache)."""
    prefill_tokens: int
    """Most padded prompt tokens prefilled in one forward when slots are filled; more are prefilled in turns."""

    def __post_init__(self) -> None:
        check_choice(self.cuda_graphs, ("auto", "on", "off"), "engine.cuda_graphs")
        check_choice(self.compile, ("auto", "on", "off"), "engine.compile")
        for key in ("sync_every", "max_slots", "max_length", "length_step", "graph_cache", "prefill_tokens"):
            if getattr(self, key) < 1:
                raise ValueError(f"engine.{key}={getattr(self, key)} must be a positive integer")
        self.slot_buckets = sorted(int(b) for b in self.slot_buckets)
        if not self.slot_buckets or self.slot_buckets[0] < 1:
            raise ValueError(f"engine.slot_buckets={self.slot_buckets} must list positive slot counts")
        if self.slot_buckets[-1] < self.max_slots:
            raise ValueError(
                f"engine.slot_buckets ends at {self.slot_buckets[-1]} < engine.max_slots={self.max_slots}; "
                "add a bucket of at least max_slots"
            )

    def graphs_on(self, device: torch.device) -> bool:
        """Returns whether decode steps are captured as CUDA graphs on ``device``.

        Raises:
            ValueError: ``engine.cuda_graphs=on`` for a model that is not on CUDA.
        """
        if self.cuda_graphs == "on" and device.type != "cuda":
            raise ValueError(
                f"engine.cuda_graphs=on but the model is on {device}; CUDA graphs need a CUDA device "
                "(set engine.cuda_graphs=auto or off)"
            )
        return self.cuda_graphs != "off" and device.type == "cuda"

    def check_slots(self, slots: int, key: str) -> None:
        """Raises ValueError naming ``key`` when ``slots`` sequences exceed ``engine.max_slots``."""
        if slots > self.max_slots:
            raise ValueError(
                f"{key}={slots} is larger than the engine's cache (engine.max_slots={self.max_slots}); "
                f"lower {key} or raise engine.max_slots"
            )

    def compile_on(self, device: torch.device) -> bool:
        """Returns whether the decode step's model part runs through ``torch.compile`` on ``device``.

        ``auto`` compiles exactly when the step is captured as a CUDA graph: the compile time (tens of
        seconds at 7B, once per process) pays back over a run's decode steps there, not on a CPU.
        """
        return self.compile == "on" or (self.compile == "auto" and self.graphs_on(device))
