"""Answer extraction from generated text: strict (``<answer>`` tags only) and lenient (with fallbacks).

Both SCOPD and LT-OPD prompt for reasoning followed by ``<answer>...</answer>``. Following
lm-evaluation-harness's strict/flexible pair (style convention 21), every output gets two
extractions that are reported side by side:

* **strict**: the stripped content of the *last* complete ``<answer>...</answer>`` pair
  (case-insensitive); ``None`` when there is none or it is empty.
* **lenient**: the strict answer when there is one, otherwise the first rule that applies:
  1. text after the last unclosed ``<answer>`` (generation cut off before the closing tag);
  2. with ``<think>...</think>`` blocks removed (and everything before a stray ``</think>``):
     the content of the last ``\\boxed{...}``;
  3. the rest of the line after the last "answer is" / "answer:" cue;
  4. the whole remaining text.
  Empty results are ``None``.

A ``None`` answer is an extraction miss: it is passed on as ``ScoredItem.prediction = None`` and
counted, never replaced by a placeholder string (style convention 22).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

EXTRACTOR_VERSION = 1
"""Bump when any extraction rule changes what is returned for some text."""

_TAGGED = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)
_OPEN = re.compile(r"<answer>", re.IGNORECASE)
_CLOSE = re.compile(r"</answer>", re.IGNORECASE)
_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.IGNORECASE | re.DOTALL)
_THINK_END = re.compile(r"</think>", re.IGNORECASE)
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_CUE = re.compile(r"answer\s*(?:is|:)\s*:?", re.IGNORECASE)
_STRAY_TAG = re.compile(r"</?(?:answer|think)>", re.IGNORECASE)

STATUSES = ("tagged", "fallback", "empty")
"""``tagged``: strict found an answer; ``fallback``: only lenient did; ``empty``: neither did."""


@dataclass(frozen=True)
class Extraction:
    """Strict and lenient answers of one generated text, with a status and the extractor version."""

    strict: str | None
    """Content of the last complete ``<answer>`` pair, stripped; ``None`` if absent or empty."""
    lenient: str | None
    """``strict`` if set, else the fallback answer; ``None`` if nothing usable remains."""
    status: str
    """One of ``STATUSES``."""
    version: int = EXTRACTOR_VERSION


def _clean(text: str) -> str | None:
    text = _STRAY_TAG.sub(" ", text).strip()
    return text or None


def _strict(text: str) -> str | None:
    found = _TAGGED.findall(text)
    return _clean(found[-1]) if found else None


def _fallback(text: str) -> str | None:
    opens = list(_OPEN.finditer(text))
    if opens and not _CLOSE.search(text, opens[-1].end()):
        return _clean(text[opens[-1].end() :])
    body = _THINK_BLOCK.sub(" ", text)
    ends = list(_THINK_END.finditer(body))
    if ends:
        body = body[ends[-1].end() :]
    boxed = _BOXED.findall(body)
    if boxed:
        return _clean(boxed[-1])
    cues = list(_CUE.finditer(body))
    if cues:
        line = body[cues[-1].end() :].split("\n", 1)[0].strip().rstrip(".")
        if line:
            return _clean(line)
    return _clean(body)


def extract_answer(text: str) -> Extraction:
    """Returns the strict and lenient answers of one generated text (rules in the module docstring).

    Args:
        text: The decoded model output, special tokens removed.
    """
    if not isinstance(text, str):
        raise TypeError(f"extract_answer expects the generated text as str, got {type(text).__name__}")
    strict = _strict(text)
    if strict is not None:
        return Extraction(strict=strict, lenient=strict, status="tagged")
    lenient = _fallback(text)
    return Extraction(strict=None, lenient=lenient, status="fallback" if lenient is not None else "empty")


def count_extractions(extractions: Iterable[Extraction]) -> dict[str, int]:
    """Returns ``{"n", "tagged", "fallback", "empty"}`` counts; ``n - tagged`` are strict misses."""
    counts = {"n": 0, **{status: 0 for status in STATUSES}}
    for extraction in extractions:
        counts["n"] += 1
        counts[extraction.status] += 1
    return counts
