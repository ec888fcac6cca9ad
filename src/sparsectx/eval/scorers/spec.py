"""The scorer record: everything the rest of the code needs to know about one scorer, declared beside its code.

A scorer module ends with ``SPECS = (ScorerSpec(...), ...)``; ``sparsectx.eval.scorers.register_scorers`` files
each in ``SCORERS``, and every consumer reads the spec from there (docs/extending.md, "Add a scorer"):

* evaluation: ``fn`` (the metrics), ``version``, ``headlines``, what a row must hold (``needs_options``,
  ``needs``, ``rules``, ``group_rule``: ``sparsectx.eval.protocol.load_bench_items``) and each prediction's
  verdict (``is_correct``: the predictions file, Pass@K);
* the report's bootstrap: ``resampling`` (``Resampling``, ``sparsectx.report.bootstrap``);
* the optional judge: ``judge`` (``JudgedAnswers``, ``sparsectx.eval.judge``);
* the VLMEvalKit bridge: ``vlmeval`` and ``vlmeval_headlines`` (``VlmevalReading``,
  ``sparsectx.eval.vlmeval_bridge``).

A scorer is a pure function ``(items: Sequence[ScoredItem]) -> dict[str, float]`` with an integer version (style
convention 21: bump the version whenever the output for the same items changes; the table code refuses to mix
versions of one benchmark). Every scorer reports its headline metric under the key ``"score"`` on the scale the
papers print (percent; out of 1000 for OCRBench; summed category scores for MME), plus ``"n"`` (items scored) and
``"missing"`` (items whose ``prediction`` is ``None``, i.e. extraction misses).

A scorer whose papers disagree on the headline (POPE: LT-OPD's macro accuracy over the subsets, VLMEvalKit's
pooled F1) declares its candidates (``ScorerSpec.headlines``, keys of its metrics) and sets no ``"score"``
itself: the benchmark config names one (``bench.<name>.headline``), and ``ScorerSpec.__call__`` copies it to
``"score"``. There is no default among them: scoring without a named headline is an error.

This module and the scorer modules import nothing beyond the standard library and the package's own pure
modules: VLMEvalKit's environment imports them too (``make vlmeval-env`` installs sparsectx there for
``sparsectx.integrations.vlmeval_model``, which reaches the scorers through ``sparsectx.eval.protocol``), beside
other versions of the third-party packages. The VLMEvalKit readings are only read by the bridge, in the project's
environment (``sparsectx.integrations.vlmeval_evaluate``, run in VLMEvalKit's, does not import sparsectx).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from sparsectx.eval.scorers.base import GroupRule, RowRule, ScoredItem, ScoreFn, check_items
from sparsectx.registry import Registry

# --- the bootstrap's resampling (sparsectx.report.bootstrap) ---------------------------------------------------


@dataclass(frozen=True)
class Resampling:
    """What the bootstrap resamples for one scorer: the unit of items scored jointly, its stratum, and copies.

    A benchmark's headline is not always a mean of item scores: MME adds acc+ over image pairs, HallusionBench
    counts figure and question groups with every row right, POPE averages its subsets' accuracies (or takes an F1
    over all rows), HR-Bench averages its cycles, CV-Bench its image sources. A resample must keep what the
    scorer scores jointly together; a spec cannot be built without one (``ScorerSpec.resampling`` has no
    default), so a new scorer whose items are scored jointly is never resampled item by item silently.
    """

    unit: Callable[[ScoredItem], str]
    """The key of the items scored jointly (a pair, a circular question, a figure set), or the item's id."""
    stratum: Callable[[ScoredItem], str]
    """Units are drawn with replacement *within* each stratum, so every resample keeps the benchmark's composition
    (MME's categories, CV-Bench's sources; a resample without a category would change the metric's definition,
    not only its value)."""
    copy: Callable[[ScoredItem, int], ScoredItem]
    """Item ``k`` (>= 1) of a unit drawn several times, relabelled so that the scorer sees a new unit (a new id, a
    new pair key) and never merges or rejects the repeats."""
    additive: bool
    """The headline of any multiset of units is the item-count-weighted mean of the units' own headlines
    (accuracy-type scorers). Those are resampled through one scorer call per unit; the others are rescored by the
    scorer on every resample (``sparsectx.report.bootstrap``), which checks either way."""


def item_unit(item: ScoredItem) -> str:
    """Returns the item's id: every item is its own unit."""
    return item.id


def whole_benchmark(item: ScoredItem) -> str:
    """Returns "": one stratum, the whole benchmark."""
    return ""


def subset_stratum(item: ScoredItem) -> str:
    """Returns the item's subset (POPE's subsets, HR-Bench's cycles, CV-Bench's sources) as its stratum."""
    return item.subset


def copy_id(item: ScoredItem, k: int) -> ScoredItem:
    """Returns copy ``k`` of an item scored alone: a new id."""
    return dataclasses.replace(item, id=f"{item.id}#{k}")


def copy_group(item: ScoredItem, k: int) -> ScoredItem:
    """Returns copy ``k`` of an item scored with its ``group``: a new id in a new group."""
    return dataclasses.replace(item, id=f"{item.id}#{k}", group=f"{item.group}#{k}")


ITEM_MEAN = Resampling(item_unit, whole_benchmark, copy_id, additive=True)
"""Accuracy-type headlines: the mean over items of a per-item score."""
BY_SUBSET = Resampling(item_unit, subset_stratum, copy_id, additive=False)
"""Items alone, drawn within their subset, the headline recomputed (a mean over the subsets, a pooled F1)."""

# --- the optional judge (sparsectx.eval.judge) -------------------------------------------------------------------


def item_options(item: ScoredItem) -> dict[str, str]:
    """Returns the item's own options (letter -> text)."""
    return dict(item.options)


@dataclass(frozen=True)
class JudgedAnswers:
    """What the optional judge re-reads for a scorer whose rule can leave an answer undecided.

    ``sparsectx.eval.judge`` puts each undecided answer to a chat model with the prompt template ``template``,
    reads the reply with ``verdict`` and rescores with the scorer; decided answers are never judged.
    """

    template: str
    """The key of ``conf/judge_answers.yaml``'s ``prompts`` the judge's prompt is built from (``yes_no``,
    ``choice``)."""
    undecided: Callable[[ScoredItem], bool]
    """Whether the scorer's rule reads nothing in ``item.prediction`` (never called on a miss, ``None``)."""
    verdict: Callable[[str, Mapping[str, str]], str | None]
    """The answer a judge's reply decides (``Yes``/``No``, an option letter), None when unreadable, given the
    item's options (``options``)."""
    options: Callable[[ScoredItem], dict[str, str]] = item_options
    """The options an item is read against and listed in the prompt (MMMU's open questions as ``MMMU_preproc``
    makes them)."""


# --- the VLMEvalKit bridge (sparsectx.eval.vlmeval_bridge) ------------------------------------------------------

RowProblem = Callable[[str, Mapping[str, str]], str | None]
"""Reads one benchmark TSV row (its ``index``, its cells as written) as VLMEvalKit's ``evaluate`` will; returns
what would make it misread the row (naming the row, the column and the value), None when nothing."""


@dataclass(frozen=True)
class VlmevalReading:
    """How one scorer's benchmark reads in VLMEvalKit: what its ``evaluate`` needs and its headline figure."""

    columns: tuple[str, ...]
    """TSV columns the dataset's ``evaluate`` reads (besides ``index`` and ``prediction``)."""
    headline: Callable[[dict[str, float]], float | None]
    """VLMEvalKit's headline from its flattened figures, on the project score's scale (None: no single one)."""
    project_key: str
    """The project metric it equals when both read the answers alike."""
    describe: str
    """VLMEvalKit's function and figure, as the bridge's result block names it (``headline``)."""
    row_problem: RowProblem | None = None
    """What in a row VLMEvalKit would misread (``RowProblem``); None = no row check."""


# --- the record ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScorerSpec:
    """A scorer and everything the rest of the code reads about it (module docstring)."""

    name: str
    """Registry key; the ``scorer:`` of the benchmark configs that use it."""
    version: int
    """Bumped whenever the output for the same items changes (style convention 21)."""
    fn: ScoreFn
    """The pure scoring function: items -> metrics."""
    is_correct: Callable[[ScoredItem], bool]
    """Whether one item's (not ``None``) prediction is right by the scorer's rule: each row's ``correct`` in the
    predictions file, and Pass@K's hits (``correct``)."""
    resampling: Resampling
    """How the bootstrap resamples its items (``Resampling``)."""
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
    judge: JudgedAnswers | None = None
    """What the optional judge re-reads; None = the rule always decides (nothing to judge)."""
    vlmeval: VlmevalReading | None = None
    """The benchmark's VLMEvalKit reading; None = the bridge compares no headline and checks no column."""
    vlmeval_headlines: Mapping[str, VlmevalReading] = field(default_factory=dict)
    """For a scorer with several ``headlines``: headline -> VLMEvalKit's figure for it."""

    def __post_init__(self) -> None:
        if not isinstance(self.version, int) or isinstance(self.version, bool) or self.version < 1:
            raise ValueError(f"scorer {self.name!r}: version={self.version!r} must be an int >= 1")
        if len(self.headlines) == 1 or "score" in self.headlines:
            raise ValueError(
                f"scorer {self.name!r}: headlines={self.headlines!r} must be () or several metric names, not 'score'"
            )

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

    def correct(self, item: ScoredItem) -> bool:
        """Returns whether one item's prediction is right: never for a miss (``None``), else ``is_correct``."""
        return item.prediction is not None and self.is_correct(item)

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


SCORERS: Registry[ScorerSpec] = Registry("scorer")


def score_items(name: str, items: Sequence[ScoredItem], headline: str | None = None) -> ScoreReport:
    """Returns the metrics of scorer ``name`` on ``items`` (``score`` = ``headline`` for a scorer with several,
    ``ScorerSpec.headlines``), with the scorer's name and version."""
    scorer = SCORERS.get(name)
    return ScoreReport(scorer=name, scorer_version=scorer.version, metrics=scorer(items, headline))
