"""Pass@K cohort protocols (``passk.cohort``): which benchmark items the fixed-context analysis draws from.

``paper_numeric`` -- SCOPD App. A, "Diagnostic set": "free-form numerical image-question pairs from MMStar,
CVBench, MMMU-Pro, BLINK, LogicVista, and LLaVA-CoT [...] For multiple-choice datasets, we remove the answer
options only when the remaining question has an independently meaningful numerical answer [...] The cohort is
selected from examples associated with successful unpruned greedy generations" (160/64/57/70/33/116 items).
The paper's 500 items are not public, so its rule is applied to the user's benchmark files. The rule below is
the project's reading of "independently meaningful numerical answer", not the authors' code:

1. A row without options qualifies when its gold answer is a plain number (``PLAIN_NUMBER``: digits, an
   optional sign, thousands commas and decimal part; no unit, fraction, percent sign or word).
2. A multiple-choice row qualifies when every one of its option texts is a plain number (so its gold is one)
   and its question, with any copy of the options in its text cut off (``split_inline_options``), does not
   refer to them (``REFERS_TO_OPTIONS``: "option", "choice", "choose", "select"). It is then asked without
   options, and its gold becomes the gold option's text.
3. A row whose options sit only in its question text (LogicVista's) is read as in 2 when the text lists them
   as consecutive lettered items ``A. .. B. ..`` (``A:``, ``A)``, ``(A)``); otherwise its letter gold makes it
   no numeric item.

Every kept item is asked as SCOPD App. A's prompt writes it, ``{question}`` then the instruction
(``QUESTION_ONLY``), and scored by ``number_match``; the cohort is the qualifying items the full-context model
answers correctly under greedy decoding, in a seeded order up to a per-source cap (``passk.source_caps``:
the paper's counts; ``passk.max_items`` caps too). LLaVA-CoT's 116 items come from training data, not a
benchmark file, and have no source here.

``authors_code`` -- the project's earlier choice, after the authors' code (100 audited MMStar items): a
benchmark's own items asked as the benchmark asks them and scored by its scorer, those the full-context greedy
run answers correctly (``passk.full_context_leaf``), the first ``passk.max_items`` in file order.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sparsectx.data import Item
from sparsectx.data.layout import PromptParts
from sparsectx.eval.config import AUTHORS_CODE, PAPER_NUMERIC, BenchSpec

RULES = {
    PAPER_NUMERIC: (
        "SCOPD App. A diagnostic set, the project's reading: rows whose gold is a plain number, and multiple-choice "
        "rows whose option texts are all plain numbers and whose question does not refer to its options, asked "
        "without options ({question} + instruction, gold = the gold option's text, scored by number_match); of "
        "those, the items the full-context greedy model answers, in a seeded order up to passk.source_caps"
    ),
    AUTHORS_CODE: (
        "the authors' code: the benchmark's items as the benchmark asks and scores them that the full-context "
        "greedy model answers, in file order up to passk.max_items (their run: 100 audited MMStar items)"
    ),
}
"""Cohort name -> the rule it applies, as recorded in every Pass@K JSON."""

PLAIN_NUMBER = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
"""A plain number (whole string): ``12``, ``-3``, ``0.5``, ``1,000``, ``2,500.75`` (not ``.5``, which
``parse_number`` reads as 5)."""
REFERS_TO_OPTIONS = re.compile(r"\b(?:options?|choices?|choose|select)\b", re.IGNORECASE)
"""Words by which a question points at its option list: such a question has no answer without the list."""
_MARKER = re.compile(r"(?:^|(?<=[\s,;]))(?:\(([A-Z])\)|([A-Z])[.:)])(?=\s)")
"""An inline option's letter: ``(A)``, ``A.``, ``A:`` or ``A)`` at the start or after a space, comma or
semicolon, followed by a space."""
_HEADER = re.compile(
    r"(?:options|choices|answer choices|select from the following(?: choices)?|choose from)\s*(?::\s*)?$",
    re.IGNORECASE,
)
r"""The words that introduce an inline option list, cut off with it. Written ``\s*(?::\s*)?``, not ``\s*:?\s*``:
two optional blank runs side by side make the matcher try every split of a long blank run (quadratic time)."""

QUESTION_ONLY = PromptParts(
    parts=["{question}"],
    option="",
    options_joiner="",
    options_header="",
    options_footer="",
    source="SCOPD App. A 'Prompt': {question}, then the reasoning instruction",
)
"""The prompt parts of a ``paper_numeric`` item: the bare question (the instruction follows it)."""


def is_plain_number(text: str) -> bool:
    """Returns whether ``text`` (surrounding blanks aside) is a plain number (``PLAIN_NUMBER``)."""
    return PLAIN_NUMBER.fullmatch(text.strip()) is not None


def split_inline_options(question: str) -> tuple[str, dict[str, str]]:
    """Returns (the question with an inline option list cut off, that list as letter -> text).

    The list is the last run of consecutive letter markers A, B, C, ... (at least two) in the text, with the
    words introducing it (``Options:``, ``Choices:``); a question without one comes back whole with ``{}``.
    MMStar repeats its options as ``\\nOptions: A: x, B: y``; LogicVista keeps its options only there.
    """
    markers = [(m.start(), m.end(), m.group(1) or m.group(2)) for m in _MARKER.finditer(question)]
    at_letter: dict[str, list[int]] = {}  # letter -> its markers' positions in ``markers``, ascending
    for i, (_, _, letter) in enumerate(markers):
        at_letter.setdefault(letter, []).append(i)
    for first in reversed(at_letter.get("A", [])):
        chain, last = [markers[first]], first
        while True:  # the next letter's first marker after the last one taken
            following = at_letter.get(chr(ord(chain[-1][2]) + 1), [])
            k = bisect_right(following, last)
            if k == len(following):
                break
            last = following[k]
            chain.append(markers[last])
        if len(chain) < 2:
            continue
        ends = [start for start, _, _ in chain[1:]] + [len(question)]
        options = {
            letter: question[end:stop].strip().rstrip(",;").strip()
            for (_, end, letter), stop in zip(chain, ends, strict=True)
        }
        stem = _HEADER.sub("", question[: chain[0][0]].rstrip()).strip()
        return stem, options
    return question.strip(), {}


@dataclass(frozen=True)
class NumericItem:
    """One qualifying row: the item as ``paper_numeric`` asks it, and how it qualified."""

    item: Item
    """The row with no options, its question cut of any inline options, its gold a plain number."""
    kind: str
    """``free_form`` (rule 1) or ``options_removed`` (rules 2 and 3)."""


def numeric_item(item: Item) -> NumericItem | None:
    """Returns ``item`` as a free-form numerical question (``paper_numeric``'s rules 1-3), or None.

    Args:
        item: A benchmark row after its layout (``apply_layout``): options letter -> text, gold an option
            letter for multiple choice, else the gold as written.
    """
    stem, inline = split_inline_options(item.question)
    options = item.options or inline
    if not options:
        if not is_plain_number(item.answer):
            return None
        return NumericItem(replace(item, question=item.question.strip(), answer=item.answer.strip()), "free_form")
    gold = options.get(item.answer.strip())
    if gold is None or not all(is_plain_number(text) for text in options.values()):
        return None
    if not stem or REFERS_TO_OPTIONS.search(stem):
        return None
    return NumericItem(replace(item, question=stem, options={}, answer=gold.strip()), "options_removed")


def numeric_items(items: Sequence[Item]) -> tuple[list[Item], dict[str, int]]:
    """Returns the qualifying items (file order) as ``paper_numeric`` asks them, and counts per rule.

    The counts are ``rows`` (usable rows read), ``free_form`` and ``options_removed`` (qualifying rows by the
    rule that admitted them) and ``qualified`` (their sum).
    """
    kept = [numeric for numeric in map(numeric_item, items) if numeric is not None]
    counts = {
        "rows": len(items),
        "free_form": sum(n.kind == "free_form" for n in kept),
        "options_removed": sum(n.kind == "options_removed" for n in kept),
    }
    return [n.item for n in kept], {**counts, "qualified": len(kept)}


def numeric_spec(spec: BenchSpec) -> BenchSpec:
    """Returns ``spec`` as ``paper_numeric`` asks and scores its items: the bare question, ``number_match``, the
    gold as written."""
    layout = replace(spec.layout, prompt=QUESTION_ONLY, answer="as_is", options="none", options_column="")
    return replace(spec, scorer="number_match", layout=layout, headline=None)


def source_cap(caps: Mapping[str, int], bench: str, max_items: int | None) -> int | None:
    """Returns the most cohort items ``bench`` gives: the smaller of its ``passk.source_caps`` entry and
    ``passk.max_items`` (None = no cap; a benchmark without an entry has none of its own)."""
    limits = [limit for limit in (caps.get(bench), max_items) if limit is not None]
    return min(limits) if limits else None


def pool_passk(payloads: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Returns the Pass@K summary of several sources' cohorts pooled into one (SCOPD Fig. 1(b)'s 500 items).

    Every figure is a mean over items, so the pooled one is the item-weighted mean of the sources' (greedy
    accuracy, pass@k, Hit>=m@n, mean correct draws), per condition; the per-source counts are kept.

    Args:
        payloads: ``<bench>.passk.json`` contents of one leaf, each with the same ``n``, ``k`` and cohort rule.

    Raises:
        ValueError: no payload, or payloads drawn with different ``n``, ``k`` or cohort rules.
    """
    if not payloads:
        raise ValueError("pool_passk: no Pass@K results to pool")
    shape = {(p["n"], tuple(p["k"]), p["cohort"]["protocol"]) for p in payloads}
    if len(shape) > 1:
        raise ValueError(f"pool_passk: sources differ in (n, k, cohort): {sorted(shape)}; pool like with like")
    first = payloads[0]
    pooled: dict[str, Any] = {
        "sources": {p["benchmark"]: {**p["cohort"]["counts"], "size": p["cohort"]["size"]} for p in payloads},
        "n": first["n"],
        "k": first["k"],
        "cohort_protocol": first["cohort"]["protocol"],
        "cohort_rule": first["cohort"]["rule"],
        "size": sum(p["cohort"]["size"] for p in payloads),
    }
    for condition in ("sparse", "no_image"):
        parts = [p[condition] for p in payloads if p.get(condition) is not None]
        pooled[condition] = _weighted(parts) if parts else None
    pooled.update(_pooled_gaps(pooled, first["n"]))
    return pooled


def _pooled_gaps(pooled: Mapping[str, Any], n: int) -> dict[str, float | None]:
    """Returns the pooled cohort's gap (pass@n - greedy), control floor (no-image pass@n) and gap over the
    control, as ``passk_mode`` writes them per source; the control counts only when it covers every item."""
    sparse, control = pooled["sparse"], pooled["no_image"]
    gap = None if sparse is None else sparse["pass_at_k"][str(n)] - sparse["greedy_accuracy"]
    complete = control is not None and sparse is not None and control["n_items"] == sparse["n_items"]
    floor = control["pass_at_k"][str(n)] if complete else None
    return {
        "gap": gap,
        "control_floor": floor,
        "gap_over_control": None if gap is None or floor is None else gap - floor,
    }


def _weighted(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Returns the item-weighted mean of per-source summaries (``passk_mode.summarize``'s shape)."""
    total = sum(part["n_items"] for part in parts)
    mean = lambda get: sum(part["n_items"] * get(part) for part in parts) / total  # noqa: E731
    return {
        "n_items": total,
        "greedy_accuracy": mean(lambda p: p["greedy_accuracy"]),
        "pass_at_k": {k: mean(lambda p, k=k: p["pass_at_k"][k]) for k in parts[0]["pass_at_k"]},
        "hit_at_least": {m: mean(lambda p, m=m: p["hit_at_least"][m]) for m in parts[0]["hit_at_least"]},
        "mean_correct_samples": mean(lambda p: p["mean_correct_samples"]),
    }
