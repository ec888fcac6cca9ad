"""The item every scorer takes, the function types of a scorer's parts, and helpers the scorers share.

The scorer record (``ScorerSpec``, its registry ``SCORERS`` and what the rest of the code reads from it) is in
``sparsectx.eval.scorers.spec``.

A scorer also declares what one row must hold to be scored at all, whatever the model answers: the fields it
needs non-empty (``ScorerSpec.needs``), a rule per field that reads the cell as the scorer will (``RowRule``: a
yes/no gold, a POPE subset, a HallusionBench index) and, for rows scored jointly, a rule over the rows
(``GroupRule``: MME's pairs). ``ScorerSpec.unscorable`` applies them, so a row no answer could be scored on is
found when the benchmark file is read, before any generation (``sparsectx.eval.protocol.load_bench_items``), not
by the scorer after it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class ScoredItem:
    """One benchmark question with the model's extracted answer and the metadata its scorer needs.

    Only ``id``, ``prediction`` and ``reference`` are common to all scorers; each scorer's
    docstring names the other fields it reads and raises ``ValueError`` when one is absent.
    """

    id: str
    """Sample id, unique within the benchmark (VLMEvalKit's ``index``)."""
    prediction: str | None
    """Extracted answer (see ``sparsectx.eval.extract``); ``None`` records an extraction miss.

    A miss is never replaced by a placeholder string (style convention 22): it is scored as wrong
    and counted under ``"missing"``.
    """
    reference: str
    """Gold answer: an option letter (MCQ), ``yes``/``no`` (Y/N, MME, POPE), or the answer text."""
    answers: tuple[str, ...] = ()
    """All acceptable or human answers: the 10 annotator answers (VQA), alternatives (OCRBench)."""
    options: Mapping[str, str] = field(default_factory=dict)
    """Option letter -> option text for multiple choice, in displayed order."""
    category: str = ""
    """Category or sub-task (MME category, OCRBench category, MMBench ability)."""
    subset: str = ""
    """Split that is scored on its own and macro-averaged (POPE: adversarial/popular/random)."""
    group: str = ""
    """Id shared by items that are scored jointly: the image of an MME question pair, or the
    question behind the circular rotations of MMBench."""


class ScoreFn(Protocol):
    """The scorer extension point: a pure function from items to named metrics."""

    def __call__(self, items: Sequence[ScoredItem]) -> dict[str, float]: ...


RowRule = Callable[[ScoredItem], object]
"""Reads one field of one row as its scorer reads it; raises ``ValueError`` saying why the row cannot be scored."""
GroupRule = Callable[[Sequence[ScoredItem]], dict[str, str]]
"""Returns item id -> why, for the rows that cannot be scored with the others of their group (an MME pair
missing its second question)."""


def check_items(items: Sequence[ScoredItem], scorer: str, needs: Iterable[str] = ()) -> None:
    """Returns nothing; raises ``ValueError`` on no items, duplicate ids or empty required fields."""
    if len(items) == 0:
        raise ValueError(f"scorer {scorer!r} got no items: an empty benchmark has no score")
    seen: set[str] = set()
    for item in items:
        if item.id in seen:
            raise ValueError(f"scorer {scorer!r}: item id {item.id!r} occurs twice")
        seen.add(item.id)
        for name in needs:
            if not getattr(item, name):
                raise ValueError(
                    f"scorer {scorer!r}: item {item.id!r} has an empty ScoredItem.{name}, which this "
                    f"scorer needs; fill it from the benchmark's metadata"
                )


def count_missing(items: Iterable[ScoredItem]) -> int:
    """Returns how many items have ``prediction is None`` (extraction misses)."""
    return sum(item.prediction is None for item in items)


def percent(hits: int, total: int) -> float:
    """Returns ``100 * hits / total`` as a float; ``total`` must be positive."""
    if total <= 0:
        raise ValueError(f"cannot take a percentage of {total} items")
    return 100.0 * hits / total


_SPACE = re.compile(r"\s+")


def squash(text: str) -> str:
    """Returns ``text`` lowercased, stripped, with runs of whitespace collapsed to one space."""
    return _SPACE.sub(" ", text).strip().lower()


def accuracy_metrics(
    items: Sequence[ScoredItem], correct: Sequence[bool], unread_key: str, unread: int
) -> dict[str, float]:
    """Returns the metrics every per-item accuracy scorer reports.

    ``score`` (percent correct), ``n``, ``missing`` (extraction misses), ``unread_key`` (answers that were
    extracted but could not be read as the benchmark's answer type) and, when items carry categories,
    ``category/<name>`` accuracies.
    """
    metrics = {
        "score": percent(sum(correct), len(items)),
        "n": float(len(items)),
        "missing": float(count_missing(items)),
        unread_key: float(unread),
    }
    if any(item.category for item in items):
        metrics |= per_key_accuracy(((it.category, ok) for it, ok in zip(items, correct, strict=True)), "category")
    return metrics


def per_key_accuracy(pairs: Iterable[tuple[str, bool]], prefix: str) -> dict[str, float]:
    """Returns ``{f"{prefix}/{key}": percent correct}`` for ``(key, correct)`` pairs, keys sorted."""
    hits: dict[str, list[int]] = {}
    for key, ok in pairs:
        counts = hits.setdefault(key, [0, 0])
        counts[0] += int(ok)
        counts[1] += 1
    return {f"{prefix}/{key}": percent(h, n) for key, (h, n) in sorted(hits.items())}
