"""The one decode engine (rollouts, greedy evaluation, Pass@K, efficiency latency): see ``decode``."""

from sparsectx.engine.config import EngineConfig
from sparsectx.engine.decode import DecodeEngine, cache_positions, engine_for
from sparsectx.engine.prompts import Prompts, context_length, pruned_prompts, select_prompts

__all__ = [
    "DecodeEngine",
    "EngineConfig",
    "Prompts",
    "cache_positions",
    "context_length",
    "engine_for",
    "pruned_prompts",
    "select_prompts",
]
