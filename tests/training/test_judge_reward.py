"""The judge reward ``judge_format`` (``sparsectx.training.judge_reward``): a chat model, not the benchmark
scorer, decides each rollout's correctness; the judge client is built once; the config composes from conf/.

The independent reference is a scripted judge (``Script``): a plain ``prompt -> reply`` callable that reads the
prediction back out of the prompt and answers from a table written in the test, recording every prompt it
is asked. An unreadable reply must neither count as 0 nor as 1 by itself: it falls back to the benchmark
scorer (checked against ``correct_format``, whose own tests pin the scorer) or stops the run.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator

import pytest
from eval.test_judge import _tiny_chat_model  # the tiny chat judge of the eval judge tests

from sparsectx.data import Item
from sparsectx.eval.judge import JudgeConfig, hf_chat
from sparsectx.eval.scorers import parse_yes_no
from sparsectx.training import judge_reward
from sparsectx.training.config import load_train_config
from sparsectx.training.judge_reward import JudgeTally, judge_fields, judge_format_reward, judged_rewards
from sparsectx.training.rewards import REWARDS, correct_format_reward

from .test_loop_support import compose_train

TAGGED = "<think>look</think><answer>{}</answer>"
PROMPT = "Q={question}|R={reference}|P={prediction}"
RULE = {"correct_weight": 1.0, "format_weight": 0.1}


def _item(answer: str, options: dict[str, str] | None = None, index: int = 3) -> Item:
    return Item(
        index=index,
        image_bytes=b"",
        question="How many cats?",
        options=options or {},
        answer=answer,
        category="",
        family="count",
        subset="",
        trace="",
        scene="{}",
        extra={},
    )


class Script:
    """A judge that replies from ``table`` (prediction -> reply; ``default`` otherwise) and records prompts.

    It reads the prediction back out of the prompt with ``pattern`` (group 1), the test's template by default.
    """

    def __init__(self, table: dict[str, str], default: str = "No", pattern: str = r"\|P=(.*)$") -> None:
        self.table, self.default, self.pattern, self.prompts = table, default, pattern, []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        prediction = re.search(self.pattern, prompt, re.DOTALL)[1]
        return self.table.get(prediction, self.default)


def _rewards(texts: list[str], items: list[Item], chat: Script, on_unreadable: str = "rule") -> list[float | None]:
    return judged_rewards(texts, items, chat, **RULE, prompt=PROMPT, on_unreadable=on_unreadable)


@pytest.fixture(autouse=True)
def fresh_judge(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts with no cached judge and zero counts."""
    monkeypatch.setattr(judge_reward, "_CHATS", {})
    monkeypatch.setattr(judge_reward, "TALLY", JudgeTally())
    yield


@pytest.mark.parametrize(
    ("text", "reply", "reward", "rule"),
    [
        (TAGGED.format("two"), "Yes", 1.1, 0.1),  # the judge accepts what exact match rejects ("two" vs "2")
        (TAGGED.format("2"), "No", 0.1, 1.1),  # and rejects what exact match accepts: the judge decides
        (TAGGED.format("two"), "yes.", 1.1, 0.1),  # read by the yes/no rule, any case and punctuation
        ("<answer>two</answer>", "Yes, it matches", 1.0, 0.0),  # correct, no think block: no format bonus
    ],
)
def test_the_judge_decides_correctness_and_the_format_bonus_is_added(
    text: str, reply: str, reward: float, rule: float
) -> None:
    item = _item("2")
    assert _rewards([text], [item], Script({}, default=reply)) == [pytest.approx(reward)]
    assert correct_format_reward([text], [item], **RULE) == [pytest.approx(rule)]  # what the rule would give


def test_the_prompt_holds_question_reference_and_prediction() -> None:
    chat = Script({"a dog": "Yes"})
    mcq = _item("b", {"A": "a cat", "B": "a dog"})
    got = _rewards([TAGGED.format("2"), TAGGED.format("a dog")], [_item("2"), mcq], chat)
    assert got == [pytest.approx(0.1), pytest.approx(1.1)]
    assert chat.prompts == [
        "Q=How many cats?|R=2|P=2",
        "Q=How many cats?\nOptions:\nA. a cat\nB. a dog|R=B. a dog|P=a dog",
    ]


def test_unscorable_items_give_none_and_are_never_judged() -> None:
    chat = Script({}, default="Yes")
    items = [_item(""), _item("C", {"A": "a cat", "B": "a dog"})]  # no reference; a letter that is no option
    assert _rewards([TAGGED.format("2")] * 2, items, chat) == [None, None]
    assert chat.prompts == []


def test_a_rollout_without_an_answer_is_wrong_without_asking() -> None:
    chat = Script({}, default="Yes")
    assert _rewards(["the answer is 2", "<think>2</think>"], [_item("2")] * 2, chat) == [0.0, 0.0]
    assert chat.prompts == []


def test_identical_predictions_are_asked_once() -> None:
    chat = Script({"2": "Yes"})
    texts = [TAGGED.format("2"), "<answer>2</answer>", TAGGED.format("3"), TAGGED.format("2")]
    assert _rewards(texts, [_item("2")] * 4, chat) == pytest.approx([1.1, 1.0, 0.1, 1.1])
    assert len(chat.prompts) == 2
    assert (judge_reward.TALLY.asked, judge_reward.TALLY.correct, judge_reward.TALLY.wrong) == (2, 1, 1)


@pytest.mark.parametrize("reply", ["Maybe", "Yes and no", ""])
def test_an_unreadable_reply_falls_back_to_the_benchmark_scorer_and_is_counted(reply: str) -> None:
    texts = [TAGGED.format("2"), TAGGED.format("3")]  # exact match: right, wrong
    with pytest.warns(UserWarning, match=r"2 rollout\(s\) scored by the benchmark scorer.*2 unreadable of 2"):
        got = _rewards(texts, [_item("2")] * 2, Script({}, default=reply))
    assert got == correct_format_reward(texts, [_item("2")] * 2, **RULE) == [pytest.approx(1.1), pytest.approx(0.1)]
    assert judge_reward.TALLY.unreadable == 2


def test_an_unreadable_reply_stops_the_run_under_on_unreadable_error() -> None:
    with pytest.raises(ValueError, match=r"'Maybe' to training item 7 reads as neither yes nor no"):
        _rewards([TAGGED.format("2")], [_item("2", index=7)], Script({}, default="Maybe"), on_unreadable="error")


def _composed_params(*overrides: str) -> dict:
    return load_train_config(compose_train(["method=grpo_judge", *overrides])).method.rl.reward.params


def test_the_preset_composes_the_judge_reward_from_conf() -> None:
    cfg = load_train_config(compose_train(["method=grpo_judge"]))
    grpo = load_train_config(compose_train(["method=grpo"]))
    reward = cfg.method.rl.reward
    assert reward.name == "judge_format" and cfg.method.name == "grpo_judge"
    assert {k: reward.params[k] for k in RULE} == grpo.method.rl.reward.params == RULE  # grpo's weights
    judge = JudgeConfig(**reward.params["judge"])  # conf/judge/hf_local.yaml + the preset's model and device
    assert (judge.backend, judge.model, judge.device) == ("hf", "Qwen/Qwen2.5-7B-Instruct", cfg.model.device)
    assert reward.params["on_unreadable"] == "rule"
    for field in ("{question}", "{reference}", "{prediction}"):
        assert field in reward.params["prompt"]
    # only the reward differs from method=grpo
    assert {**vars(cfg.method.rl), "reward": None} == {**vars(grpo.method.rl), "reward": None}


def test_the_judge_backend_is_selectable_by_override() -> None:
    params = _composed_params(
        "judge@method.rl.reward.params.judge=openai",
        "method.rl.reward.params.judge.model=served",
        "method.rl.reward.params.judge.base_url=http://127.0.0.1:8000/v1",
    )
    assert JudgeConfig(**params["judge"]).backend == "openai"


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("method.rl.reward.params.on_unreadable=zero", r"method\.rl\.reward\.params\.on_unreadable='zero'"),
        ("method.rl.reward.params.prompt='{question} {prediction}'", r"method\.rl\.reward\.params\.prompt"),
        ("method.rl.reward.params.judge.backend=gpt", r"method\.rl\.reward\.params\.judge\.backend='gpt'"),
    ],
)
def test_bad_judge_params_are_config_errors_naming_the_key(override: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _composed_params(override)


def test_the_registered_reward_builds_its_judge_once_from_the_composed_config(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[JudgeConfig] = []
    chat = Script({"2": "Yes"}, pattern=r"Model's answer: (.*?)\n")  # the preset's prompt
    monkeypatch.setattr(judge_reward, "build_chat", lambda cfg: built.append(cfg) or chat)
    params = _composed_params()
    reward = REWARDS.get("judge_format")
    assert reward is judge_format_reward
    for _ in range(3):  # three groups of one run
        assert reward([TAGGED.format("2"), TAGGED.format("3")], [_item("2")] * 2, **params) == pytest.approx([1.1, 0.1])
    assert len(built) == 1 and built[0] == JudgeConfig(**params["judge"])
    assert len(chat.prompts) == 6 and chat.prompts[0].startswith("You check whether a model's final answer")
    assert "Reference answer: 2" in chat.prompts[0] and "Model's answer: 2" in chat.prompts[0]


def test_the_hf_backend_judges_with_the_configured_chat_model(tmp_path) -> None:  # noqa: ANN001
    """The preset's hf backend on a tiny random-weight chat model: the rewards follow that model's own replies."""
    model_dir = _tiny_chat_model(tmp_path / "judge")
    params = _composed_params(f"method.rl.reward.params.judge.model={model_dir}")
    texts, items = [TAGGED.format("2"), TAGGED.format("3")], [_item("2")] * 2
    reference = hf_chat(JudgeConfig(**params["judge"]))  # the same client, built by the test
    replies = [reference(params["prompt"].format(**judge_fields(item, p))) for item, p in zip(items, "23", strict=True)]
    expected = [
        1.0 * (correct if word is None else word == "yes") + 0.1
        for word, correct in zip(
            map(parse_yes_no, replies), [True, False], strict=True
        )  # unreadable: the scorer's verdict
    ]
    with warnings.catch_warnings(record=True):  # a random judge's replies are mostly unreadable
        warnings.simplefilter("always")
        assert judge_format_reward(texts, items, **params) == pytest.approx(expected)
    assert judge_reward.TALLY.asked == 2 and len(judge_reward._CHATS) == 1
