"""Short-answer and math benchmarks in their real layouts: VLMEvalKit's ``ImageVQADataset`` (TextVQA, GQA),
``OCRBench``, ``MathVista``, ``MathVerse`` and ``LogicVista``."""

from __future__ import annotations

FILES: dict = {}
"""Benchmark name -> builder of its miniature file."""
