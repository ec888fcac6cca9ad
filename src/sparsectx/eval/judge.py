"""An optional judge for the answers the exact-matching rules cannot read; off unless asked for.

``python src/judge_answers.py result=<leaf>/<bench>.json judge=hf_local judge.model=<chat model dir>``
(``conf/judge_answers.yaml``, ``conf/judge/*.yaml``) re-reads a finished benchmark: the items whose
extracted answer the benchmark's rule leaves undecided (a yes/no answer with neither or both words, a
multiple-choice answer in which no option is read: VLMEvalKit's ``Unknown`` / failed ``can_infer``, the
items its GPT judge sees) are put to a chat model, a local Hugging Face one or an OpenAI-compatible endpoint
the user runs, with VLMEvalKit-style matching prompts; the judge's reply is read by the same rule (a
yes/no reading, an option letter), and what it decides replaces that item's answer. Every other item keeps
its answer, so its verdict cannot change. The benchmark is rescored with its own scorer, and

* ``<leaf>/<bench>.judge.jsonl`` records every judged item: id, answer, prompt, the judge's raw output and
  what it decided (``null``: the judge's reply was unreadable too, the item stays undecided);
* the result JSON gains ``judged`` (backend, model, counts, the rescored ``metrics`` and ``score``) beside
  the exact-matching ``score``, which stays the headline.

Both are written atomically once every judged item has its reply. Scorers whose rule always decides
(exact match, OCR containment, VQA accuracy) have nothing to judge.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from sparsectx.eval.config import BenchSpec, bench_spec_from
from sparsectx.eval.protocol import load_bench_items, sample_id, scored_item
from sparsectx.eval.results import write_json, write_rows
from sparsectx.eval.scorers import ScoredItem, match_choice, parse_yes_no, score_items, vlmeval_choice
from sparsectx.eval.scorers.mcq_reports import mmmu_question
from sparsectx.io import read_jsonl
from sparsectx.paths import predictions_path

YES_NO = ("yes_no", "pope", "mme", "hallusionbench")
CHOICE = ("mcq_vlmeval", "mmbench_circular", "mcq", "hrbench", "mmmu_vlmeval", "cvbench")
BACKENDS = ("hf", "openai")

Chat = Callable[[str], str]
"""A judge: prompt text -> the model's raw reply."""


@dataclass
class JudgeConfig:
    """``conf/judge/<name>.yaml``: which chat model judges, and how it is reached."""

    backend: str
    """``hf`` (a local Hugging Face chat model) or ``openai`` (an OpenAI-compatible HTTP endpoint)."""
    model: str
    """hf: a model directory or hub id; openai: the served model id."""
    base_url: str | None = None
    """openai: ``http://host:port/v1`` (``/chat/completions`` is appended)."""
    api_key_env: str = "OPENAI_API_KEY"
    """openai: the environment variable holding the key (sent when set)."""
    max_new_tokens: int = 16
    device: str = "cpu"
    timeout_s: int = 60

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"judge.backend={self.backend!r}: choose one of {BACKENDS}")
        if self.backend == "openai" and not self.base_url:
            raise ValueError("judge.backend=openai needs judge.base_url, e.g. http://127.0.0.1:8000/v1")
        if self.max_new_tokens < 1:
            raise ValueError(f"judge.max_new_tokens={self.max_new_tokens} must be >= 1")


@dataclass
class JudgeAnswersConfig:
    """``conf/judge_answers.yaml``."""

    result: str
    judge: JudgeConfig
    prompts: dict[str, str] = field(default_factory=dict)
    """``yes_no`` and ``choice`` templates; fields ``{question}``, ``{options}``, ``{answer}``."""


def undecided(scorer: str, item: ScoredItem) -> bool:
    """Returns whether ``scorer``'s rule cannot read ``item``'s answer (a miss, ``None``, is no answer to read)."""
    if item.prediction is None:
        return False
    if scorer in YES_NO:
        return parse_yes_no(item.prediction) is None
    if scorer == "mcq":
        return match_choice(item.prediction, item.options) is None
    if scorer in CHOICE:
        options = choices(scorer, item)
        return vlmeval_choice(item.prediction, options, strip=scorer != "mmbench_circular") is None
    return False


def choices(scorer: str, item: ScoredItem) -> dict[str, str]:
    """Returns the options an item is read against (MMMU's open questions as ``MMMU_preproc`` makes them)."""
    return mmmu_question(item)[0] if scorer == "mmmu_vlmeval" else dict(item.options)


def read_verdict(scorer: str, reply: str, options: Mapping[str, str]) -> str | None:
    """Returns the answer a judge's reply decides (``Yes``/``No`` or an option letter), None when unreadable."""
    if scorer in YES_NO:
        word = parse_yes_no(reply)
        return None if word is None else word.capitalize()
    letter = vlmeval_choice(reply, options)
    return letter if letter in options else None


def judge_prompt(scorer: str, item: ScoredItem, question: str, prompts: Mapping[str, str]) -> str:
    """Returns the judge's prompt for one item from the ``yes_no`` or ``choice`` template."""
    options = "\n".join(f"{letter}. {text}" for letter, text in choices(scorer, item).items())
    template = prompts["yes_no" if scorer in YES_NO else "choice"]
    return template.format(question=question, options=options, answer=item.prediction)


def hf_chat(cfg: JudgeConfig) -> Chat:
    """Returns a greedy judge over a local Hugging Face chat model (its tokenizer's chat template)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(cfg.model)
    model = AutoModelForCausalLM.from_pretrained(cfg.model).to(cfg.device).eval()

    @torch.no_grad()
    def ask(prompt: str) -> str:
        inputs = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, return_tensors="pt",
            return_dict=True,
        ).to(cfg.device)  # fmt: skip
        out = model.generate(**inputs, max_new_tokens=cfg.max_new_tokens, do_sample=False)
        return tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)

    return ask


def openai_chat(cfg: JudgeConfig) -> Chat:
    """Returns a judge over an OpenAI-compatible ``/chat/completions`` endpoint (temperature 0)."""
    url = f"{str(cfg.base_url).rstrip('/')}/chat/completions"
    key = os.environ.get(cfg.api_key_env)

    def ask(prompt: str) -> str:
        body = {
            "model": cfg.model, "messages": [{"role": "user", "content": prompt}], "temperature": 0,
            "max_tokens": cfg.max_new_tokens,
        }  # fmt: skip
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
        request = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=cfg.timeout_s) as response:
                payload = json.loads(response.read())
            return str(payload["choices"][0]["message"]["content"])
        except (urllib.error.URLError, OSError, KeyError, IndexError, json.JSONDecodeError) as err:
            raise RuntimeError(f"the judge endpoint {url} gave no reply ({err}); is the server up?") from err

    return ask


def _scored(result: Path, payload: dict[str, Any]) -> tuple[BenchSpec, list[ScoredItem], dict[str, str]]:
    """Returns the benchmark's spec, its items with the extracted answers, and id -> question text."""
    bench = payload["benchmark"]
    spec = bench_spec_from(payload["provenance"]["config"]["bench"][bench])
    items = load_bench_items(spec, 1.0).items
    answers = {row["id"]: row.get("answer") for row in read_jsonl(predictions_path(result.parent, bench))}
    missing = [sample_id(item) for item in items if sample_id(item) not in answers]
    if missing:
        raise ValueError(f"{result}: no prediction for items {missing[:5]}; rerun evaluate.py first")
    scored = [scored_item(item, spec, answers[sample_id(item)]) for item in items]
    return spec, scored, {sample_id(item): item.question for item in items}


def judge_result(cfg: JudgeAnswersConfig, chat: Chat | None = None) -> dict[str, Any]:
    """Returns the ``judged`` block after judging the undecided items of ``cfg.result`` and writing both files.

    ``chat`` replaces the configured backend (tests). Raises ``FileNotFoundError`` / ``ValueError`` naming
    the file when the result, its predictions or its benchmark file are missing or do not match.
    """
    result = Path(cfg.result)
    if not result.is_file():
        raise FileNotFoundError(f"no result JSON at {result}; run evaluate.py for this benchmark first")
    payload = json.loads(result.read_text(encoding="utf-8"))
    spec, items, questions = _scored(result, payload)
    ask = chat or (hf_chat if cfg.judge.backend == "hf" else openai_chat)(cfg.judge)
    records, final = [], []
    for item in items:
        if not undecided(spec.scorer, item):
            final.append(item)
            continue
        prompt = judge_prompt(spec.scorer, item, questions[item.id], cfg.prompts)
        reply = ask(prompt)
        verdict = read_verdict(spec.scorer, reply, choices(spec.scorer, item))
        records.append({"id": item.id, "answer": item.prediction, "prompt": prompt, "judge_output": reply,
                        "judged": verdict})  # fmt: skip
        final.append(item if verdict is None else replace(item, prediction=verdict))
    report = score_items(spec.scorer, final, spec.headline)
    block = {
        "backend": cfg.judge.backend, "model": cfg.judge.model, "config": asdict(cfg.judge),
        "n_undecided": len(records), "n_decided_by_judge": sum(r["judged"] is not None for r in records),
        "records": f"{spec.name}.judge.jsonl", "metrics": report.metrics, "score": report.metrics["score"],
    }  # fmt: skip
    write_rows(result.parent / block["records"], records)
    write_json(result, {**payload, "judged": block})
    return block
