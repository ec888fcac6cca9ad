"""Video benchmarks in their real layouts: VLMEvalKit's ``MVBench``, ``MLVU_MCQ``, ``VideoMME``,
``TempCompass_MCQ`` and Video-TT."""

from __future__ import annotations

FILES: dict = {}
"""Benchmark name -> builder of its miniature file."""
