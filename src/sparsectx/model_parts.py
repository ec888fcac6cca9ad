"""Where the parts of a transformers VLM live by module name: the vision tower and the decoder layers' mixers.

Training (LoRA targets, the frozen tower) and the plan (parameter counts per part) read the same names; a
ground-floor module, so the plan and evaluation's batch sizing never import the trainer.
"""

from __future__ import annotations

VISION_MARKERS = (".visual.", "vision_tower", "merger")
"""Substrings of a parameter's or module's dotted name inside the vision tower or its merger."""

MIXERS = ("self_attn", "linear_attn", "mlp")
"""The parts of a decoder layer whose projections LoRA may adapt (attention, linear attention, MLP)."""
