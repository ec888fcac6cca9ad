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

A served judge's credentials go only where the user sends them (``openai_chat``): a key is sent only when
``judge.api_key_env`` names its variable (no default: another tool's ``OPENAI_API_KEY`` is never picked up),
credentials (that key, ``user:token@`` in ``base_url``, sent as HTTP Basic, or an ``?api_key=`` query parameter)
travel only over https or to a loopback host (127.0.0.0/8, ::1, localhost) over http, a loopback request never
goes through an http proxy of the environment, and a redirect is an error, never followed. What is recorded
(the ``judged`` block's config, error messages) is redacted (``sparsectx.redact``).
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, unquote, urlsplit, urlunsplit

from sparsectx.eval.config import BenchSpec, bench_spec_from
from sparsectx.eval.protocol import load_bench_items, sample_id, scored_item
from sparsectx.eval.results import write_json, write_rows
from sparsectx.eval.scorers import SCORERS, ScoredItem, score_items
from sparsectx.eval.scorers.spec import JudgedAnswers
from sparsectx.io import read_jsonl
from sparsectx.paths import predictions_path
from sparsectx.redact import is_secret_name, redact, redact_text

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
    """openai: ``http://host:port/v1`` (``/chat/completions`` is appended to its path). Credentials in it
    (``user:token@``: sent as HTTP Basic; ``?api_key=``) are used but never recorded; with credentials it must
    be https or a loopback host."""
    api_key_env: str | None = None
    """openai: the environment variable holding the key, sent as a Bearer token (None: no key is sent); it
    must be set, and the key goes only over https or to a loopback host."""
    max_new_tokens: int = 16
    device: str = "cpu"
    timeout_s: int = 60

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"judge.backend={self.backend!r}: choose one of {BACKENDS}")
        if self.backend == "openai" and not self.base_url:
            raise ValueError("judge.backend=openai needs judge.base_url, e.g. http://127.0.0.1:8000/v1")
        if self.backend == "openai":
            check_endpoint(str(self.base_url), self.api_key_env)
        if self.max_new_tokens < 1:
            raise ValueError(f"judge.max_new_tokens={self.max_new_tokens} must be >= 1")


@dataclass
class JudgeAnswersConfig:
    """``conf/judge_answers.yaml``."""

    result: str
    judge: JudgeConfig
    prompts: dict[str, str] = field(default_factory=dict)
    """``yes_no`` and ``choice`` templates; fields ``{question}``, ``{options}``, ``{answer}``."""


def judged_answers(scorer: str) -> JudgedAnswers:
    """Returns what the judge re-reads for ``scorer`` (its spec's ``judge``); raises ``ValueError`` naming the scorer
    when its rule always decides, so it has no answers to judge."""
    answers = SCORERS.get(scorer).judge
    if answers is None:
        raise ValueError(
            f"scorer {scorer!r} always decides its answers (its ScorerSpec.judge is None): nothing to judge"
        )
    return answers


def undecided(scorer: str, item: ScoredItem) -> bool:
    """Returns whether ``scorer``'s rule cannot read ``item``'s answer (``ScorerSpec.judge``'s ``undecided``; a miss,
    ``None``, is no answer to read, and a scorer whose rule always decides has none)."""
    answers = SCORERS.get(scorer).judge
    return item.prediction is not None and answers is not None and answers.undecided(item)


def choices(scorer: str, item: ScoredItem) -> dict[str, str]:
    """Returns the options an item is read against (MMMU's open questions as ``MMMU_preproc`` makes them)."""
    return judged_answers(scorer).options(item)


def read_verdict(scorer: str, reply: str, options: Mapping[str, str]) -> str | None:
    """Returns the answer a judge's reply decides (``Yes``/``No`` or an option letter), None when unreadable."""
    return judged_answers(scorer).verdict(reply, options)


def judge_prompt(scorer: str, item: ScoredItem, question: str, prompts: Mapping[str, str]) -> str:
    """Returns the judge's prompt for one item from the template its scorer names (``yes_no`` or ``choice``)."""
    options = "\n".join(f"{letter}. {text}" for letter, text in choices(scorer, item).items())
    template = prompts[judged_answers(scorer).template]
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
            [{"role": "user", "content": prompt}],
            add_generation_prompt=True,
            return_tensors="pt",
            return_dict=True,
        ).to(cfg.device)
        out = model.generate(**inputs, max_new_tokens=cfg.max_new_tokens, do_sample=False)
        return tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)

    return ask


LOOPBACK_NAMES = ("localhost",)
"""Host names taken as this machine without a lookup (addresses: ``ipaddress``'s loopback, 127.0.0.0/8 and ::1)."""


def is_loopback(host: str | None) -> bool:
    """Returns whether ``host`` (a URL's host name, no brackets) is this machine: ``localhost`` or a loopback
    address. Other names are not looked up: what they resolve to can change between the check and the request."""
    if host is None:
        return False
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _credentials_in(url: SplitResult) -> list[str]:
    """Returns what in ``url`` is a credential: its userinfo, its credential-like query parameters."""
    found = ["user:token@ in it"] if "@" in url.netloc else []
    names = [unquote(part.partition("=")[0]) for part in url.query.split("&") if "=" in part]
    return found + [f"?{name}=" for name in names if is_secret_name(name)]


def check_endpoint(base_url: str, api_key_env: str | None) -> None:
    """Returns None if a served judge's ``base_url`` and key variable are safe to use; else raises naming them.

    Credentials (a key named by ``api_key_env``, userinfo or a credential query parameter in the URL) may go
    over https, or over http to a loopback host only: on any other http host they would cross the network in
    clear text. Nothing is read from the environment and nothing is sent.

    Raises:
        ValueError: not an http(s) URL; ``api_key_env`` empty; both userinfo and ``api_key_env``; credentials
            over plain http to a host that is not this machine.
    """
    shown = redact_text(base_url)
    url = urlsplit(base_url)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ValueError(
            f"judge.base_url={shown!r} must be an http or https URL with a host, e.g. http://127.0.0.1:8000/v1"
        )
    if api_key_env is not None and not api_key_env.strip():
        raise ValueError(
            f"judge.api_key_env={api_key_env!r} names no variable: set judge.api_key_env=null (no key is sent) or "
            "the name of the environment variable holding the key"
        )
    in_url = _credentials_in(url)
    if "@" in url.netloc and api_key_env is not None:
        raise ValueError(
            f"judge.base_url={shown!r} carries credentials (user:token@) and judge.api_key_env={api_key_env} "
            "names a key: give one of them (the variable is safer: a URL lands in shell histories and job scripts)"
        )
    sent = in_url + ([f"the key in ${api_key_env}"] if api_key_env is not None else [])
    if sent and url.scheme == "http" and not is_loopback(url.hostname):
        raise ValueError(
            f"judge.base_url={shown!r} is plain http to another machine, so its credentials ({', '.join(sent)}) "
            "would cross the network unencrypted: use an https:// base_url, or reach the server through a "
            "loopback address (127.0.0.1, ::1 or localhost, e.g. an SSH tunnel), or drop the credentials "
            "(judge.api_key_env=null and none in the URL) if the server needs none"
        )


class _RefusedRedirect(urllib.request.HTTPRedirectHandler):
    """Turns every redirect into an error: a redirected request would carry the judge's credentials along."""

    def redirect_request(
        self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> None:
        """Raises ``RuntimeError`` naming the endpoint and where it redirects to; nothing is followed."""
        fp.close()
        raise RuntimeError(
            f"the judge endpoint {redact_text(req.full_url)} answered {code} {msg}, a redirect to "
            f"{redact_text(newurl)}; redirects are not followed (the judge's credentials would go along): set "
            "judge.base_url to the address that answers"
        )


def chat_completions_url(base_url: str) -> str:
    """Returns the ``/chat/completions`` URL under ``base_url`` (query kept, userinfo and fragment dropped)."""
    url = urlsplit(base_url)
    host = url.netloc.rpartition("@")[2]
    return urlunsplit((url.scheme, host, f"{url.path.rstrip('/')}/chat/completions", url.query, ""))


def authorization(cfg: JudgeConfig) -> str | None:
    """Returns the ``Authorization`` header of ``cfg``'s requests: Bearer with the key of ``api_key_env``, Basic
    with the URL's userinfo, or None (no credentials).

    Raises:
        ValueError: ``api_key_env`` names a variable that is not set.
    """
    if cfg.api_key_env is not None:
        key = os.environ.get(cfg.api_key_env)
        if not key:
            raise ValueError(
                f"judge.api_key_env={cfg.api_key_env} names the variable holding the judge's key, but "
                f"{cfg.api_key_env} is not set: export it, or set judge.api_key_env=null if the server needs no key"
            )
        return f"Bearer {key}"
    url = urlsplit(str(cfg.base_url))
    if url.username is None:
        return None
    userinfo = f"{unquote(url.username)}:{unquote(url.password or '')}"
    return "Basic " + base64.b64encode(userinfo.encode()).decode("ascii")


def openai_chat(cfg: JudgeConfig) -> Chat:
    """Returns a judge over an OpenAI-compatible ``/chat/completions`` endpoint (temperature 0).

    Its credentials go to ``cfg.base_url``'s host only (module docstring): no redirect is followed, and a
    loopback endpoint is reached directly, never through the environment's http proxy.

    Raises:
        ValueError: ``cfg.api_key_env`` names a variable that is not set (before any request).
    """
    url = chat_completions_url(str(cfg.base_url))
    shown = redact_text(url)
    auth = authorization(cfg)
    proxies = urllib.request.ProxyHandler({} if is_loopback(urlsplit(url).hostname) else None)
    opener = urllib.request.build_opener(proxies, _RefusedRedirect)

    def ask(prompt: str) -> str:
        body = {
            "model": cfg.model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": 0,
            "max_tokens": cfg.max_new_tokens,
        }
        request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
        if auth is not None:  # an unredirected header: a redirect would not carry it either
            request.add_unredirected_header("Authorization", auth)
        try:
            with opener.open(request, timeout=cfg.timeout_s) as response:
                payload = json.loads(response.read())
            return str(payload["choices"][0]["message"]["content"])
        except (urllib.error.URLError, OSError, KeyError, IndexError, json.JSONDecodeError) as err:
            raise RuntimeError(  # not chained: the cause's own text may hold the URL unredacted
                f"the judge endpoint {shown} gave no reply ({redact_text(str(err))}); is the server up?"
            ) from None

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
        records.append(
            {"id": item.id, "answer": item.prediction, "prompt": prompt, "judge_output": reply, "judged": verdict}
        )
        final.append(item if verdict is None else replace(item, prediction=verdict))
    report = score_items(spec.scorer, final, spec.headline)
    block = {
        "backend": cfg.judge.backend,
        "model": cfg.judge.model,
        "config": redact(asdict(cfg.judge)),
        "n_undecided": len(records),
        "n_decided_by_judge": sum(r["judged"] is not None for r in records),
        "records": f"{spec.name}.judge.jsonl",
        "metrics": report.metrics,
        "score": report.metrics["score"],
    }
    write_rows(result.parent / block["records"], records)
    write_json(result, {**payload, "judged": block})
    return block
