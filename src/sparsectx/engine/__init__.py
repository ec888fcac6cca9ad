"""The one decode engine (rollouts, greedy evaluation, Pass@K, efficiency latency): see ``decode``."""

from sparsectx.engine.config import EngineConfig
from sparsectx.engine.decode import DecodeEngine, engine_for
from sparsectx.engine.prompts import Prompts, context_length, pruned_prompts

__all__ = ["DecodeEngine", "EngineConfig", "Prompts", "context_length", "engine_for", "pruned_prompts"]
