"""Scorers: one benchmark family per module, each scorer declared once in a ``ScorerSpec`` filed in ``SCORERS``.

A scorer module ends with ``SPECS = (ScorerSpec(...), ...)`` (``sparsectx.eval.scorers.spec``): its function and
version, and everything the rest of the code reads about it (per-item correctness, bootstrap resampling, what the
judge re-reads, its VLMEvalKit reading). ``register_scorers`` finds the modules and registers every spec; a
benchmark config names its scorer by key, e.g. ``scorer: mme``. Adding a scorer is one module and the bench YAML
that names it (docs/extending.md, "Add a scorer").
"""

from __future__ import annotations

from sparsectx.eval.scorers.base import ScoredItem, ScoreFn
from sparsectx.eval.scorers.spec import SCORERS, ScoreReport, ScorerSpec, score_items
from sparsectx.registry import package_modules

INFRASTRUCTURE_MODULES = ("base", "spec")
"""The package's modules that declare no scorer: the item and helpers, the record and its registry. Every other
module of the package is a scorer module and must define ``SPECS``."""


def register_scorers() -> None:
    """Imports every scorer module of this package and registers each spec of its ``SPECS`` in ``SCORERS``.

    Modules are found by listing the package's folders (``sparsectx.registry.package_modules``) rather than
    by an import line per module, so adding a scorer is one module (and the bench YAML naming it), and a module
    cannot be left out of the registry. A spec already registered is skipped, so a second call registers only
    the modules added since (a test's own folder on ``__path__``).

    Raises:
        TypeError: a scorer module defines no ``SPECS``, or one that is not a tuple of ``ScorerSpec``.
        KeyError: two specs share a name (``Registry.register``).
    """
    for name, module in package_modules(__name__, __path__, INFRASTRUCTURE_MODULES):
        specs = getattr(module, "SPECS", None)
        if not isinstance(specs, tuple) or not all(isinstance(spec, ScorerSpec) for spec in specs):
            raise TypeError(
                f"{module.__file__}: a scorer module of {__name__} defines no SPECS tuple of ScorerSpec (found "
                f"{type(specs).__name__}); end it with SPECS = (ScorerSpec(name=..., ...),) (docs/extending.md, "
                f'"Add a scorer"), or, if it declares no scorer, add {name!r} to '
                f"{__name__}.INFRASTRUCTURE_MODULES"
            )
        for spec in specs:
            if spec.name not in SCORERS or SCORERS.get(spec.name) is not spec:
                SCORERS.register(spec.name)(spec)


register_scorers()

# Helpers other modules use, importable from the package (their modules are imported by register_scorers).
from sparsectx.eval.scorers.exact import parse_number, vlmeval_accuracy  # noqa: E402
from sparsectx.eval.scorers.mcq import match_choice, vlmeval_choice  # noqa: E402
from sparsectx.eval.scorers.ocrbench import ocr_contains  # noqa: E402
from sparsectx.eval.scorers.vqa import (  # noqa: E402
    normalize_evalai_answer,
    normalize_vqa_answer,
    vqa_soft_accuracy,
)
from sparsectx.eval.scorers.yes_no import parse_yes_no  # noqa: E402

__all__ = [
    "INFRASTRUCTURE_MODULES",
    "SCORERS",
    "ScoreFn",
    "ScoreReport",
    "ScoredItem",
    "ScorerSpec",
    "match_choice",
    "normalize_evalai_answer",
    "normalize_vqa_answer",
    "ocr_contains",
    "parse_number",
    "parse_yes_no",
    "register_scorers",
    "score_items",
    "vlmeval_accuracy",
    "vlmeval_choice",
    "vqa_soft_accuracy",
]
