"""The judge reward ``judge_format``: a chat model decides whether each rollout's answer matches the reference.

SCOPD App. E (seed 004): GRPO's "rewards are assigned by a Qwen2.5-7B judge"; App. C describes the
answer-matching judge's input as the question, the reference answer and the model's prediction. Per rollout:

    reward = correct_weight · judged_correct + format_weight · has_format(text)

- The judge is ``sparsectx.eval.judge``'s (``JudgeConfig``, ``hf_chat`` / ``openai_chat``; the params' ``judge``
  block composes from ``conf/judge/*.yaml``). It is built once per process and judge config (``judge_chat``), on
  the first reward, never per rollout. A served judge's credentials are checked at config load (``judge.py``:
  https or loopback only, the key's variable set) and recorded redacted (``config.yaml``, ``meta.json``, W&B).
- The prompt is the ``prompt`` param (``conf/method/grpo_judge.yaml``), a template with the fields
  ``{question}`` (with its options, when it has some), ``{reference}`` (an option letter with its text) and
  ``{prediction}`` (the rollout's strict ``<answer>``, as the benchmarks extract it). Identical predictions of
  one call are asked once (a greedy judge gives the same reply to the same prompt).
- The reply is read by VLMEvalKit's yes/no rule (``parse_yes_no``, ``YOrN_Extraction``), the reading
  ``src/judge_answers.py`` gives its judge: yes = correct, no = wrong.
- A rollout with no strict ``<answer>`` is wrong without asking (nothing to match), as ``correct_format``
  scores it; an item whose reference is unscorable (``rewards.scorable``) gets None, as there.
- An unreadable reply (neither word, or both) never becomes a silent 0 or 1. ``on_unreadable: rule`` scores
  that rollout by the benchmark scorer instead (``correct_format``'s correctness), counts it in ``TALLY`` and
  warns with the running counts; ``on_unreadable: error`` stops the run, naming the item and the reply.
"""

from __future__ import annotations

import json
import string
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sparsectx.data import Item
from sparsectx.eval.extract import extract_answer
from sparsectx.eval.judge import Chat, JudgeConfig, authorization, hf_chat, openai_chat
from sparsectx.eval.scorers import parse_yes_no
from sparsectx.training.rewards import REWARD_CHECKS, REWARDS, has_format, is_answer_correct, scorable

UNREADABLE_POLICIES = ("rule", "error")
"""``on_unreadable``: score the rollout by the benchmark scorer (counted, warned) | raise."""

PROMPT_FIELDS = frozenset({"question", "reference", "prediction"})
"""The fields a judge prompt must use, each exactly as named (App. C's judge input)."""


@dataclass
class JudgeTally:
    """Running counts of this process's judge calls (a run's log shows them in the unreadable warnings)."""

    asked: int = 0
    """Prompts put to the judge."""
    correct: int = 0
    """Replies read as yes."""
    wrong: int = 0
    """Replies read as no."""
    unreadable: int = 0
    """Replies with neither or both words, scored by ``on_unreadable``."""


TALLY = JudgeTally()
_CHATS: dict[str, Chat] = {}


def build_chat(cfg: JudgeConfig) -> Chat:
    """Returns a new judge client for ``cfg``: ``hf_chat`` (backend hf) or ``openai_chat`` (backend openai)."""
    return (hf_chat if cfg.backend == "hf" else openai_chat)(cfg)


def judge_chat(judge: Mapping[str, Any]) -> Chat:
    """Returns the process's judge for ``judge`` (a ``JudgeConfig`` mapping): built on first use, then reused."""
    key = json.dumps(dict(judge), sort_keys=True)
    if key not in _CHATS:
        _CHATS[key] = build_chat(JudgeConfig(**judge))
    return _CHATS[key]


def judge_fields(item: Item, prediction: str) -> dict[str, str]:
    """Returns the prompt fields of ``item`` and ``prediction``: a multiple-choice question lists its options,
    and its reference is the option letter with the option's text (the judge may match either)."""
    question, reference = item.question.strip(), item.answer.strip()
    if item.options:
        options = "\n".join(f"{letter}. {text}" for letter, text in item.options.items())
        question = f"{question}\nOptions:\n{options}"
        letter = next(k for k in item.options if k.upper() == reference.upper())
        reference = f"{letter}. {item.options[letter]}"
    return {"question": question, "reference": reference, "prediction": prediction}


def judged_rewards(
    texts: Sequence[str],
    items: Sequence[Item],
    chat: Chat,
    *,
    correct_weight: float,
    format_weight: float,
    prompt: str,
    on_unreadable: str,
) -> list[float | None]:
    """Returns ``correct_weight·judged + format_weight·format`` per rollout, ``chat`` judging; None if unscorable.

    Args:
        texts: the decoded rollouts (special tokens removed).
        items: the training item of each rollout (same length).
        chat: the judge, prompt text -> its raw reply.
        correct_weight: weight of the judged correctness.
        format_weight: weight of the think/answer format check (``rewards.has_format``).
        prompt: the template, fields ``{question}``, ``{reference}``, ``{prediction}``.
        on_unreadable: ``rule`` (the benchmark scorer decides that rollout) or ``error``.

    Raises:
        ValueError: an unreadable reply under ``on_unreadable=error`` (names the item and the reply).
    """
    replies: dict[str, str] = {}
    out: list[float | None] = []
    fallbacks = 0
    for text, item in zip(texts, items, strict=True):
        if not scorable(item):
            out.append(None)
            continue
        prediction = extract_answer(text).strict
        correct = False
        if prediction is not None:
            query = prompt.format(**judge_fields(item, prediction))
            if query not in replies:
                replies[query] = chat(query)
                TALLY.asked += 1
            word = parse_yes_no(replies[query])
            if word is None:
                if on_unreadable == "error":
                    raise ValueError(
                        f"the judge's reply {replies[query]!r} to training item {item.index} reads as neither "
                        "yes nor no (method.rl.reward.params.on_unreadable=error)"
                    )
                fallbacks += 1
                correct = is_answer_correct(text, item)
            else:
                correct = word == "yes"
        out.append(correct_weight * correct + format_weight * has_format(text))
    _count(replies.values(), fallbacks)
    return out


def _count(replies: Iterable[str], fallbacks: int) -> None:
    words = [parse_yes_no(reply) for reply in replies]
    TALLY.correct += words.count("yes")
    TALLY.wrong += words.count("no")
    TALLY.unreadable += words.count(None)
    if fallbacks:
        warnings.warn(
            f"judge_format: {fallbacks} rollout(s) scored by the benchmark scorer, the judge's reply being neither "
            f"yes nor no; this process so far: {TALLY.unreadable} unreadable of {TALLY.asked} replies",
            stacklevel=2,
        )


@REWARDS.register("judge_format")
def judge_format_reward(
    texts: Sequence[str],
    items: Sequence[Item],
    *,
    correct_weight: float,
    format_weight: float,
    judge: Mapping[str, Any],
    prompt: str,
    on_unreadable: str,
) -> list[float | None]:
    """Returns ``correct_weight·judged + format_weight·format`` per rollout; None for an unscorable item.

    Args:
        texts: the decoded rollouts (special tokens removed).
        items: the training item of each rollout (same length).
        correct_weight: weight of the judged correctness (1.0: the SCOPD authors' GRPO weight).
        format_weight: weight of the think/answer format check (0.1 there).
        judge: a ``JudgeConfig`` mapping (``conf/judge/*.yaml``); its client is built once (``judge_chat``).
        prompt: the judge's template, fields ``{question}``, ``{reference}``, ``{prediction}``.
        on_unreadable: ``rule`` or ``error`` (module docstring).
    """
    return judged_rewards(
        texts,
        items,
        judge_chat(judge),
        correct_weight=correct_weight,
        format_weight=format_weight,
        prompt=prompt,
        on_unreadable=on_unreadable,
    )


def check_judge_params(params: Mapping[str, Any]) -> None:
    """Returns None if ``judge_format``'s params are usable; else raises naming the key (run at config load).

    Raises:
        ValueError: a bad ``judge`` block (also a served judge's credentials over plain http to another machine,
            or an unset key variable), a prompt whose fields are not exactly ``PROMPT_FIELDS``, or an unknown
            ``on_unreadable``.
    """
    key = "method.rl.reward.params"
    try:
        judge = JudgeConfig(**params["judge"])  # a served judge's base_url and key variable are checked here
        if judge.backend == "openai":
            authorization(judge)  # the key's variable is set: the run does not stop at its first reward
    except TypeError as err:
        raise ValueError(f"{key}.judge: {err} (the keys of conf/judge/*.yaml)") from None
    except ValueError as err:
        raise ValueError(f"{key}.{err}") from None
    fields = {name for _, name, _, _ in string.Formatter().parse(params["prompt"]) if name is not None}
    if fields != PROMPT_FIELDS:
        raise ValueError(f"{key}.prompt uses the fields {sorted(fields)}; it must use exactly {sorted(PROMPT_FIELDS)}")
    if params["on_unreadable"] not in UNREADABLE_POLICIES:
        raise ValueError(
            f"{key}.on_unreadable={params['on_unreadable']!r}: choose one of {UNREADABLE_POLICIES} (rule: the "
            "benchmark scorer decides a rollout whose judge reply is unreadable; error: stop)"
        )


REWARD_CHECKS["judge_format"] = check_judge_params
