"""The item every scorer takes, the scorer record kept in the registry, and shared helpers.

A scorer is a pure function ``(items: Sequence[ScoredItem]) -> dict[str, float]`` filed in
``SCORERS`` together with an integer version (style convention 21: bump the version whenever the
output for the same items changes; the table code refuses to mix versions of one benchmark).
Every scorer reports its headline metric under the key ``"score"`` on the scale the papers print
(percent; out of 1000 for OCRBench; summed category scores for MME), plus ``"n"`` (items scored)
and ``"missing"`` (items whose ``prediction`` is ``None``, i.e. extraction misses).

A scorer whose papers disagree on the headline (POPE: LT-OPD's macro accuracy over the subsets, VLMEvalKit's
pooled F1) registers its candidates (``Scorer.headlines``, keys of its metrics) and sets no ``"score"``
itself: the benchmark config names one (``bench.<name>.headline``), and ``Scorer.__call__`` copies it
to ``"score"``. There is no default among them: scoring without a named headline is an error.

A scorer also declares what one row must hold to be scored at all, whatever the model answers: the fields it
needs non-empty (``needs``), a rule per field that reads the cell as the scorer will (``rules``: a yes/no gold,
a POPE subset, a HallusionBench index) and, for rows scored jointly, a rule over the rows (``group_rule``: MME's
pairs). ``Scorer.unscorable`` applies them, so a row no answer could be scored on is found when the benchmark
file is read, before any generation (``sparsectx.eval.protocol.load_bench_items``), not by the scorer after it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sparsectx.registry import Registry


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


@dataclass(frozen=True)
class Scorer:
    """A registered scorer: its registry key, its integer version and the pure scoring function."""

    name: str
    version: int
    fn: ScoreFn
    needs_options: bool = False
    """Every item is a multiple-choice question (its reference an option letter): a benchmark row without
    options is refused when the file is read, before any generation (``protocol.load_bench_items``)."""
    headlines: tuple[str, ...] = ()
    """The metrics (keys of ``fn``'s output) a benchmark config chooses its headline among; empty = ``fn``
    reports its one headline as ``score`` itself."""
    needs: tuple[str, ...] = ()
    """``ScoredItem`` fields every item must have non-empty (``check_items``)."""
    rules: Mapping[str, RowRule] = field(default_factory=dict)
    """``ScoredItem`` field -> the rule that reads it on one row (``RowRule``), in the order they are applied."""
    group_rule: tuple[str, GroupRule] | None = None
    """The field that joins rows scored together, and the rule over them (``GroupRule``); None = rows alone."""

    def check_headline(self, headline: str | None, key: str) -> None:
        """Returns None when ``headline`` suits this scorer: one of ``headlines``, or None for a scorer without
        any; else raises ``ValueError`` naming ``key`` (the config key) and the choices."""
        if not self.headlines:
            if headline is not None:
                raise ValueError(
                    f"{key}={headline!r}: scorer {self.name!r} has a single headline (its 'score'); leave "
                    f"{key} out (null)"
                )
            return
        if headline not in self.headlines:
            raise ValueError(
                f"{key}={headline!r}: scorer {self.name!r} reports several headlines and none is the default; "
                f"set {key} to one of {list(self.headlines)}"
            )

    def __call__(self, items: Sequence[ScoredItem], headline: str | None = None) -> dict[str, float]:
        """Returns the metrics of ``items``, ``score`` being ``headline`` (which a scorer with ``headlines``
        needs, and one without refuses: ``check_headline``)."""
        self.check_headline(headline, "headline")
        check_items(items, self.name, self.needs)
        metrics = self.fn(items)
        return metrics if headline is None else {"score": metrics[headline], **metrics}

    def unscorable(self, items: Sequence[ScoredItem]) -> dict[str, tuple[str, str]]:
        """Returns item id -> (``ScoredItem`` field, why) for every item this scorer cannot score whatever its
        prediction: a field in ``needs`` empty, a cell a rule refuses, then a group ``group_rule`` refuses
        among the other items. Known before generation, such rows are skipped instead of failing the scorer."""
        problems: dict[str, tuple[str, str]] = {}
        for item in items:
            empty = [name for name in self.needs if not getattr(item, name)]
            if empty:
                problems[item.id] = (empty[0], f"is empty, and scorer {self.name!r} needs it")
                continue
            for name, rule in self.rules.items():
                try:
                    rule(item)
                except ValueError as err:
                    problems[item.id] = (name, str(err))
                    break
        if self.group_rule is not None:
            name, rule = self.group_rule
            rest = [item for item in items if item.id not in problems]
            problems |= {item_id: (name, why) for item_id, why in rule(rest).items()}
        return problems


@dataclass(frozen=True)
class ScoreReport:
    """Metrics of one scorer run, stamped with the scorer's name and version for the result JSON."""

    scorer: str
    scorer_version: int
    metrics: dict[str, float]


SCORERS: Registry[Scorer] = Registry("scorer")


def register_scorer(
    name: str,
    version: int,
    needs_options: bool = False,
    headlines: tuple[str, ...] = (),
    needs: tuple[str, ...] = (),
    rules: Mapping[str, RowRule] | None = None,
    group_rule: tuple[str, GroupRule] | None = None,
) -> Callable[[ScoreFn], ScoreFn]:
    """Returns a decorator that files ``fn`` in ``SCORERS`` under ``name`` with ``version`` (and whether every
    item it scores must have options, ``Scorer.needs_options``; the headlines a config chooses among,
    ``Scorer.headlines``; what one row must hold to be scored, ``Scorer.needs``, ``rules`` and ``group_rule``)."""
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f"scorer {name!r}: version={version!r} must be an int >= 1")
    if len(headlines) == 1 or "score" in headlines:
        raise ValueError(f"scorer {name!r}: headlines={headlines!r} must be () or several metric names, not 'score'")

    def add(fn: ScoreFn) -> ScoreFn:
        scorer = Scorer(
            name=name,
            version=version,
            fn=fn,
            needs_options=needs_options,
            headlines=headlines,
            needs=needs,
            rules=dict(rules or {}),
            group_rule=group_rule,
        )
        SCORERS.register(name)(scorer)
        return fn

    return add


def score_items(name: str, items: Sequence[ScoredItem], headline: str | None = None) -> ScoreReport:
    """Returns the metrics of scorer ``name`` on ``items`` (``score`` = ``headline`` for a scorer with several,
    ``Scorer.headlines``), with the scorer's name and version."""
    scorer = SCORERS.get(name)
    return ScoreReport(scorer=name, scorer_version=scorer.version, metrics=scorer(items, headline))


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
