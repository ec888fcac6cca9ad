"""One downloaded row -> a training candidate (question, answer, trace, image reference), or why not.

Answer styles (``SourceConfig.answer_style``):

- ``plain``: the response is the answer; the trace is the ``trace`` column wrapped as
  ``<think>…</think><answer>…</answer>`` when the source has one, else "" (training then uses
  ``<answer>answer</answer>``, ``sparsectx.training.batches.reference_text``).
- ``think_answer``: the response (the ``trace`` column, when set, followed by the ``answer`` column) holds
  ``<think>…</think>`` and ``<answer>…</answer>``, as OpenMMReasoner's processed LLaVA-CoT does; the answer
  is the text inside ``<answer>``.
- ``llava_cot_tags``: the original LLaVA-CoT response ``<SUMMARY>…</SUMMARY><CAPTION>…</CAPTION>
  <REASONING>…</REASONING><CONCLUSION>…</CONCLUSION>``: summary, caption and reasoning (blank lines between)
  become the think part and the conclusion the answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparsectx.data.sources.config import SourceConfig
from sparsectx.data.sources.records import Embedded, RawRow

FILTERED = "filtered"
"""A drop by the source's rule (text-only row, several images, ``where``): counted, never budgeted."""
PROBLEM = "problem"
"""A drop for bad input (malformed row, missing or undecodable image): counted against the skip budget."""

LLAVA_COT_TAGS = ("SUMMARY", "CAPTION", "REASONING", "CONCLUSION")


@dataclass(frozen=True)
class Candidate:
    """A usable row before its image is read: where it came from and what it will write."""

    source: str
    file: Path
    label: str
    source_id: str
    question: str
    answer: str
    trace: str
    image: Path | Embedded
    sha256: str
    """The image's expected hex sha256 ("" = unchecked)."""


@dataclass(frozen=True)
class Drop:
    """A row left out: ``kind`` is ``FILTERED`` or ``PROBLEM``; ``reason`` is the counted key."""

    kind: str
    reason: str
    detail: str


def parse_row(raw: RawRow, name: str, source: SourceConfig) -> Candidate | Drop:
    """Returns the row's ``Candidate``, or the ``Drop`` saying why it cannot be used."""
    if raw.record is None:
        return Drop(PROBLEM, "malformed row", raw.problem)
    record = raw.record
    for field, wanted in source.where.items():
        if str(record.get(field)) != wanted:
            return Drop(FILTERED, f"{field} is not {wanted}", f"{field}={record.get(field)!r}")
    image = _one_image(record.get(source.fields["image"]), source)
    if isinstance(image, Drop):
        return image
    texts = _texts(record, source)
    if isinstance(texts, Drop):
        return texts
    question, response, trace = texts
    question = _clean_question(question, source.image_token)
    if not question:
        return Drop(PROBLEM, "empty question", "the question is empty once the image token is removed")
    styled = style_response(response, trace, source.answer_style)
    if isinstance(styled, Drop):
        return styled
    sha256 = str(record.get(source.sha256_field) or "").lower() if source.sha256_field else ""
    if source.sha256_field and not re.fullmatch(r"[0-9a-f]{64}", sha256):
        return Drop(PROBLEM, "malformed row", f"field {source.sha256_field!r} is not a hex sha256")
    id_field = source.fields["id"]
    source_id = str(record.get(id_field, "")) if id_field else raw.label
    return Candidate(name, raw.file, raw.label, source_id, question, *styled, image, sha256)


def _one_image(cell: Any, source: SourceConfig) -> Path | Embedded | Drop:
    """Returns the row's single image reference, a FILTERED drop for none or several, or a PROBLEM drop."""
    if isinstance(cell, list):
        if len(cell) > 1:
            return Drop(FILTERED, "several images", f"{len(cell)} images")
        cell = cell[0] if cell else None
    if cell is None or cell == "":
        return Drop(FILTERED, "no image", "the row has no image (a text-only row)")
    if isinstance(cell, Embedded):
        return cell
    if not isinstance(cell, str):
        return Drop(PROBLEM, "malformed row", f"image cell is {type(cell).__name__}, not a path")
    if not source.image_root:
        return Drop(PROBLEM, "malformed row", "image cell is a path but the source sets no image_root")
    root = Path(source.image_root)
    if Path(cell).is_absolute() or ".." in Path(cell).parts:
        return Drop(PROBLEM, "image path leaves image_root", f"image {cell!r} is not inside {root}")
    return root / source.image_template.format(cell)


def _texts(record: dict[str, Any], source: SourceConfig) -> tuple[str, str, str] | Drop:
    """Returns (question, response, trace column text) of the row, or a PROBLEM drop naming what is missing."""
    fields = source.fields
    if source.layout == "fields":
        values = []
        for role in ("question", "answer"):
            value = record.get(fields[role])
            if not isinstance(value, str):
                return Drop(PROBLEM, "malformed row", f"field {fields[role]!r} is missing or not text")
            values.append(value)
        trace = record.get(fields["trace"], "") if fields["trace"] else ""
        return values[0], values[1], trace if isinstance(trace, str) else ""
    turns = record.get(fields["conversations"])
    if not isinstance(turns, list):
        return Drop(PROBLEM, "malformed row", f"field {fields['conversations']!r} is missing or not a list")
    question = response = None
    for turn in turns:
        if not isinstance(turn, dict) or not isinstance(turn.get(fields["text"]), str):
            return Drop(PROBLEM, "malformed row", f"a turn lacks a text {fields['text']!r}")
        speaker, text = turn.get(fields["speaker"]), turn[fields["text"]]
        if question is None and speaker == fields["user"]:
            question = text
        elif question is not None and speaker == fields["assistant"]:
            response = text
            break
    if question is None or response is None:
        return Drop(PROBLEM, "malformed row", "no user turn followed by an assistant turn")
    return question, response, ""


def _clean_question(question: str, image_token: str) -> str:
    """Returns the question without the image placeholder and surrounding whitespace."""
    return (question.replace(image_token, "") if image_token else question).strip()


def _tag(text: str, tag: str) -> str | None:
    """Returns the stripped content of the first ``<tag>…</tag>`` in ``text``, or None without one."""
    match = re.search(rf"<{tag}>(.*?)</{tag}>", text, re.DOTALL)
    return match.group(1).strip() if match else None


def style_response(response: str, trace: str, style: str) -> tuple[str, str] | Drop:
    """Returns (answer, trace) of a response under ``style`` (module docstring), or a PROBLEM drop."""
    if style == "plain":
        answer = response.strip()
        if not answer:
            return Drop(PROBLEM, "empty answer", "the response is empty")
        think = trace.strip()
        return answer, f"<think>{think}</think><answer>{answer}</answer>" if think else ""
    if style == "think_answer":
        text = f"{trace}{response}"
        think, answer = _tag(text, "think"), _tag(text, "answer")
        if think is None or not answer:
            return Drop(PROBLEM, "missing think/answer", "the response lacks <think>…</think> or <answer>…</answer>")
        return answer, f"<think>{think}</think><answer>{answer}</answer>"
    parts = {tag: _tag(response, tag) for tag in LLAVA_COT_TAGS}
    missing = [tag for tag, part in parts.items() if not part]
    if missing:
        return Drop(PROBLEM, "missing LLaVA-CoT tag", f"the response lacks <{'>, <'.join(missing)}>")
    think = "\n\n".join(str(parts[tag]) for tag in LLAVA_COT_TAGS[:3])
    answer = str(parts["CONCLUSION"])
    return answer, f"<think>{think}</think><answer>{answer}</answer>"
