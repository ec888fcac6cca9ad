"""Judge-scored benchmarks through VLMEvalKit's own ``evaluate`` (``vlmeval_score.py judge_model=<id>``), offline.

Without VLMEvalKit: a judge without credentials, a key variable that is not set, credentials that would cross
the network in clear text, judge settings without a judge and a judge name VLMEvalKit cannot file are refused
before anything is written. In VLMEvalKit's environment (``make vlmeval-env``; skipped with that command when
absent), a loopback OpenAI-compatible server stands in for the judge: MathVista (whose ``evaluate`` always asks
a judge, vlmeval/dataset/image_vqa.py ``MathVista.evaluate``) gets the judge's extractions for exactly the
answers its rule cannot read, and its accuracy reads back as the ``vlmeval`` score; HallusionBench (a judge only
for the answers ``YOrN_Extraction`` reads as Unknown, and only when VLMEvalKit's ``gpt_key_set`` accepts
``$OPENAI_API_KEY``) gets the project's figures for the same answers with the judge's verdicts in place, with a
key that is not OpenAI-shaped; exact matching on MathVista is refused naming ``judge_model=``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from sparsectx.eval.config import compose_bench
from sparsectx.eval.protocol import load_bench_items, sample_id, scored_item
from sparsectx.eval.scorers import parse_yes_no, score_items
from sparsectx.eval.vlmeval_bridge import BridgeConfig, score_with_vlmeval
from sparsectx.hashing import file_sha256
from sparsectx.paths import predictions_path, result_path
from sparsectx.rehearsal.benchmarks import write_rows
from sparsectx.rehearsal.benchmarks.vqa import mathvista

from .vlmeval_cases import CASES, require_vlmeval_env

KEY_VARIABLE = "SPARSECTX_TEST_VLMEVAL_JUDGE_KEY"
MATHVISTA_ANSWERS = {"1": "B", "2": "The cup holds one thousand grams", "3": "roughly six tenths"}
"""Row 1 is read by MathVista's rule (``post_check``: letter B, right); rows 2 and 3 only by a judge."""
EXTRACTIONS = {"one thousand grams": "1000", "six tenths": "0.5"}
"""What the stand-in judge extracts from an answer: row 2 right (1000), row 3 wrong (gold 0.6)."""


def leaf(root: Path, bench: str, rows: list[dict[str, str]], answers: list[str | None]) -> Path:
    """Returns ``<leaf>/<bench>.json`` for ``rows`` answered by ``answers``, written as ``evaluate.py`` writes a
    leaf (the benchmark TSV, the predictions JSONL, the result scored by the benchmark's own scorer)."""
    root.mkdir(parents=True, exist_ok=True)
    tsv = write_rows(root / "bench.tsv", rows)
    spec = compose_bench(bench, [f"bench.{bench}.path={tsv}"])
    items, skipped, _ = load_bench_items(spec, 0.0)
    assert not skipped and len(items) == len(answers)
    by_id = dict(zip((sample_id(item) for item in items), answers, strict=True))
    report = score_items(spec.scorer, [scored_item(item, spec, by_id[sample_id(item)]) for item in items], None)
    out = result_path(root / "leaf", bench)
    predictions_path(out.parent, bench).parent.mkdir(parents=True, exist_ok=True)
    records = [{"id": i, "answer": a, "output": f"<answer>{a}</answer>"} for i, a in by_id.items()]
    predictions_path(out.parent, bench).write_text("".join(json.dumps(r) + "\n" for r in records))
    provenance = {"config": {"bench": {bench: asdict(spec)}}, "inputs": {"bench_sha256": file_sha256(tsv)}}
    payload = {
        "benchmark": bench,
        "scorer": spec.scorer,
        "score": report.metrics["score"],
        "metrics": report.metrics,
        "n_scored": len(items),
        "n_rows": len(items),
        "provenance": provenance,
    }
    out.write_text(json.dumps(payload, indent=2))
    return out


def _mathvista_leaf(root: Path) -> Path:
    rows = mathvista().rows
    return leaf(root, "mathvista", rows, [MATHVISTA_ANSWERS[row["index"]] for row in rows])


# --- refused before anything is written ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        (
            {"judge_model": "gpt-4o-mini"},
            r"judge_model=gpt-4o-mini sends .* https://api\.openai\.com/v1.*judge_api_key_env=",
        ),
        ({"judge_base_url": "http://127.0.0.1:8000/v1"}, r"judge_base_url.* only with a judge: set judge_model="),
        ({"judge_api_key_env": "OPENAI_API_KEY"}, r"judge_api_key_env.* only with a judge: set judge_model="),
        (
            {"judge_model": "m", "judge_base_url": "http://judge.example:8000/v1", "judge_api_key_env": "K"},
            r"judge_base_url='http://judge\.example:8000/v1' is plain http to another machine",
        ),
        ({"judge_model": "m", "judge_base_url": "https://u:p@judge.example/v1"}, r"credentials in judge_base_url"),
        ({"judge_model": "m", "judge_base_url": "ftp://127.0.0.1/v1"}, r"judge_base_url='ftp://127\.0\.0\.1/v1'"),
        ({"judge_model": "Qwen/Qwen2.5-7B-Instruct", "judge_base_url": "http://127.0.0.1:8000/v1"}, r"'/'.*served"),
    ],
)
def test_judge_settings_are_refused_before_anything_runs(settings: dict[str, str], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        BridgeConfig(result="x.json", **settings)


def test_a_key_variable_that_is_not_set_is_refused_and_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_VARIABLE, raising=False)
    result = _mathvista_leaf(tmp_path)
    before = result.read_bytes()
    cfg = BridgeConfig(
        result=str(result), env=str(tmp_path / "no-env"), judge_model="gpt-4o-mini", judge_api_key_env=KEY_VARIABLE
    )
    with pytest.raises(ValueError, match=rf"judge_api_key_env={KEY_VARIABLE} .* but {KEY_VARIABLE} is not set"):
        score_with_vlmeval(cfg)
    assert result.read_bytes() == before and not (result.parent / "mathvista.vlmeval").exists()


# --- VLMEvalKit's evaluate with a loopback judge ---------------------------------------------------------


class _Judge(BaseHTTPRequestHandler):
    """An OpenAI-compatible ``/chat/completions`` endpoint: records each request, answers as a judge would."""

    seen: list[tuple[str, str, str | None]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        content = body["messages"][-1]["content"]
        text = content if isinstance(content, str) else "\n".join(part["text"] for part in content)
        _Judge.seen.append((body["model"], text, self.headers.get("Authorization")))
        reply = "Hello"
        if "Extracted answer:" in text:  # MathVista's extraction prompt ends with the answer, then this
            reply = next(value for key, value in EXTRACTIONS.items() if key in text.rsplit("Model respone:", 1)[1])
        elif "Yes / No" in text:  # YOrN_match_prompt
            reply = "No"
        payload = json.dumps({"choices": [{"message": {"content": reply}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def judge_url() -> Iterator[str]:
    """Yields the base URL of a loopback stand-in judge (its requests in ``_Judge.seen``)."""
    server = HTTPServer(("127.0.0.1", 0), _Judge)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Judge.seen.clear()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()


def _judged(text: str) -> bool:
    return "Extracted answer:" in text or "Yes / No" in text


@pytest.mark.slow
def test_vlmeval_evaluate_asks_the_judge_and_reads_its_score_back(
    tmp_path: Path, judge_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = require_vlmeval_env()
    monkeypatch.setenv(KEY_VARIABLE, "token-not-openai-shaped")
    settings = {"judge_model": "served-judge", "judge_base_url": judge_url, "judge_api_key_env": KEY_VARIABLE}

    result = _mathvista_leaf(tmp_path / "mathvista")
    block = score_with_vlmeval(BridgeConfig(result=str(result), env=str(env), **settings))
    asked = [text.rsplit("Model respone: ", 1)[1] for _, text, _ in _Judge.seen if _judged(text)]
    assert sorted(asked) == sorted(f"{MATHVISTA_ANSWERS[i]}Extracted answer:" for i in ("2", "3"))
    assert {(model, auth) for model, _, auth in _Judge.seen} == {("served-judge", "Bearer token-not-openai-shaped")}
    assert block["judge_requests"] == len(_Judge.seen) - 1  # all but the bridge's own check that the judge answers
    assert block["metrics"]["Overall/hit"] == 2 and block["metrics"]["Overall/prefetch"] == 1
    assert block["score"] == pytest.approx(200 / 3) and block["project_score"] == pytest.approx(100 / 3)
    assert block["agrees"] is None and block["judge"] == "served-judge" and block["judge_endpoint"] == judge_url
    assert json.loads(result.read_text())["vlmeval"] == block

    _Judge.seen.clear()
    rows, answers = CASES["hallusionbench"][-1]()
    result = leaf(tmp_path / "hallusionbench", "hallusionbench", rows, answers)
    block = score_with_vlmeval(BridgeConfig(result=str(result), env=str(env), **settings))
    unknown = [a for a in answers if parse_yes_no(a or "") is None]  # VLMEvalKit's Unknown: the judge's items
    assert sum(_judged(text) for _, text, _ in _Judge.seen) == len(unknown) > 0
    verdicts = leaf(tmp_path / "verdicts", "hallusionbench", rows, ["No" if a in unknown else a for a in answers])
    expected = json.loads(verdicts.read_text())["metrics"]
    assert {m: block["metrics"][f"Overall/{m}"] for m in ("aAcc", "fAcc", "qAcc")} == pytest.approx(
        {m: expected[m] for m in ("aAcc", "fAcc", "qAcc")}
    )

    result = _mathvista_leaf(tmp_path / "exact")
    with pytest.raises(RuntimeError, match=r"MathVista's evaluate scores only with a judge.*judge_model="):
        score_with_vlmeval(BridgeConfig(result=str(result), env=str(env)))
