"""Video-MME and Video-TT: VLMEvalKit's own answer rule (the first A-D after answer phrases), not the generic reader.

Sources: nvidia-vlmeval 26.3 vlmeval/dataset/videomme.py ``VideoMME.evaluate`` and utils/videomme.py
``extract_characters_regex`` / ``get_dimension_rating``; Video-TT (absent from 26.3): upstream
open-compass/VLMEvalKit vlmeval/dataset/videott.py ``VideoTT.evaluate`` and utils/videott.py (commit 160057c),
whose ``extract_characters_regex`` and ``extract_option`` are the same text as Video-MME's.

With ``model='exact_matching'`` a row is hit when ``extract_characters_regex(str(prediction))`` equals the
``answer`` cell. Restated: strip the text; delete each answer phrase of its list wherever it occurs (two pairs
lack the comma between them, so Python joins them: ``"The best option isThe correct option is"`` and ``"Best
answer:Best option:"`` are deleted as such, never their halves; ``"Answer:"`` and ``"Option:"`` are in the list);
the first capital A-D anywhere in the rest is the answer (``"Based on ..."`` reads as B, ``"E"`` as nothing; its
"more than ten words with no capital A-D" case reads as nothing, as any text with none does). A text read as
nothing goes to ``extract_option``, which reads options only from lines 2.. of the ``question`` cell: both files
keep the options elsewhere (Video-MME in ``candidates``, Video-TT in ``question_prompt``), so it finds none and
``extract_answer_from_item`` returns ``Z``, never a gold letter; such a row is a miss.

Headline: Video-MME's ``get_dimension_rating`` reports ``overall/overall``, the mean score as text rounded to
three decimals (and per duration, domain, sub-category, task type); Video-TT's reports ``overall/score`` =
hits / rows x 100 (and per ``capability``). ``score`` is hits / rows x 100. An extraction miss (``None``) is
wrong, as VLMEvalKit's ``str(nan)`` = ``"nan"`` reads as nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from sparsectx.eval.scorers.base import ScoredItem, accuracy_metrics
from sparsectx.eval.scorers.spec import ITEM_MEAN, ScorerSpec, VlmevalReading

VERSION = 1

PREFIXES = (
    "The best answer is",
    "The correct answer is",
    "The answer is",
    "The answer",
    "The best option isThe correct option is",
    "Best answer:Best option:",
    "Answer:",
    "Option:",
)
"""``extract_characters_regex``'s answer phrases as Python reads its list (two adjacent literals joined)."""
_LETTER = re.compile(r"[ABCD]")


def videomme_choice(prediction: str | None) -> str:
    """Returns the letter Video-MME's ``extract_characters_regex`` reads in ``prediction``, "" when none."""
    if prediction is None:
        return ""
    text = prediction.strip()
    for prefix in PREFIXES:
        text = text.replace(prefix, "")
    found = _LETTER.search(text)  # its "more than ten words and no A-D" case reads nothing either way
    return found.group(0) if found is not None else ""


def is_videomme_correct(item: ScoredItem) -> bool:
    """Returns whether Video-MME's (and Video-TT's) rule reads the gold letter in ``item.prediction``."""
    return item.prediction is not None and videomme_choice(item.prediction) == item.reference.strip()


def _score(items: Sequence[ScoredItem]) -> dict[str, float]:
    correct = [is_videomme_correct(item) for item in items]
    unmatched = sum(item.prediction is not None and not videomme_choice(item.prediction) for item in items)
    return accuracy_metrics(items, correct, "unmatched", unmatched)


def score_videomme(items: Sequence[ScoredItem]) -> dict[str, float]:
    """Returns Video-MME accuracy in percent (hits / rows x 100; VLMEvalKit's ``overall/overall`` x 100, which
    it rounds to three decimals).

    Reads ``reference`` (gold letter). Keys: ``score``, ``n``, ``missing``, ``unmatched`` (answers the rule
    reads as nothing), ``category/<name>`` when categories are set.
    """
    return _score(items)


def score_video_tt(items: Sequence[ScoredItem]) -> dict[str, float]:
    """Returns Video-TT accuracy in percent (VLMEvalKit's ``overall/score``); the rule is Video-MME's.

    Reads ``reference`` (gold letter). Keys as ``videomme``'s.
    """
    return _score(items)


SPECS = (
    ScorerSpec(
        name="videomme",
        version=VERSION,
        fn=score_videomme,
        is_correct=is_videomme_correct,
        resampling=ITEM_MEAN,  # get_dimension_rating's overall mean score
        needs_options=True,
        needs=("reference",),
    ),
    ScorerSpec(
        name="video_tt",
        version=VERSION,
        fn=score_video_tt,
        is_correct=is_videomme_correct,
        resampling=ITEM_MEAN,  # get_dimension_rating's overall score
        needs_options=True,
        needs=("reference",),
        vlmeval=VlmevalReading(
            ("capability", "answer"), lambda m: m["overall/score"], "score", "get_dimension_rating overall/score"
        ),
    ),
)
