"""The optional judge (``sparsectx.eval.judge``): only the answers VLMEvalKit's exact-matching rules cannot read
are judged, every one is recorded with the judge's raw output, and no item the rules decided changes.

Which items are undecided is checked against the literal VLMEvalKit transcriptions of the rule tests
(``ref_yorn_extraction``: ``Unknown``; ``ref_can_infer``: nothing inferred). The judges: a scripted one (a
fixed reply, so that the judge decides), a tiny random-weight chat model built here (its replies must be
what ``generate`` gives on the same prompt, recorded verbatim), and an OpenAI-compatible endpoint served
on loopback by this test.
"""

from __future__ import annotations

import json
import string
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
import torch
from tiny_models import SPECIALS, TEMPLATE
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from sparsectx.eval.judge import JudgeAnswersConfig, JudgeConfig, judge_result
from sparsectx.eval.scorers import score_items

from .test_scorer_vlmeval_mcq_exact import ref_can_infer
from .test_scorer_vlmeval_rules import ref_yorn_extraction
from .vlmeval_cases import CASES, make_leaf

PROMPTS = {
    "yes_no": "Q: {question}\nA: {answer}\nYes or No?",
    "choice": "Q: {question}\n{options}\nA: {answer}",
}


def _leaf(tmp_path: Path, bench: str) -> Path:
    rows, predictions = CASES[bench][-1]()
    return make_leaf(tmp_path, bench, rows, predictions)


def _answers(result: Path) -> dict[str, str | None]:
    lines = (result.parent / f"{result.stem}.predictions.jsonl").read_text().splitlines()
    return {row["id"]: row["answer"] for row in map(json.loads, lines)}


def _ref_undecided(bench: str, result: Path) -> set[str]:
    """Returns the ids VLMEvalKit's exact matching leaves undecided (literal transcriptions)."""
    answers = _answers(result)
    if bench == "pope":
        return {i for i, a in answers.items() if a is not None and ref_yorn_extraction(a) == "Unknown"}
    rows, _ = CASES[bench][-1]()
    options = {row["index"]: {k: row[k] for k in "ABCD" if row[k]} for row in rows}
    for row in rows:  # MMMU_preproc: an open question's options are its answer and "Other Answers"
        if "A" not in options[row["index"]]:
            options[row["index"]] = {"A": row["answer"], "B": "Other Answers"}
    return {i for i, a in answers.items() if a is not None and not ref_can_infer(a, options[i])}


def _config(result: Path, judge: JudgeConfig) -> JudgeAnswersConfig:
    return JudgeAnswersConfig(result=str(result), judge=judge, prompts=PROMPTS)


SCRIPTED = JudgeConfig(backend="hf", model="scripted")


@pytest.mark.parametrize(
    ("bench", "reply", "verdict"), [("pope", "Yes.", "Yes"), ("mmbench_en", "B", "B"), ("mmmu", "A", "A")]
)
def test_only_undecided_items_are_judged_and_decided_ones_never_change(tmp_path, bench, reply, verdict):
    result = _leaf(tmp_path, bench)
    before = json.loads(result.read_text())
    asked: list[str] = []
    block = judge_result(_config(result, SCRIPTED), chat=lambda prompt: asked.append(prompt) or reply)
    records = [json.loads(line) for line in (result.parent / f"{bench}.judge.jsonl").read_text().splitlines()]
    expected = _ref_undecided(bench, result)
    assert expected and {r["id"] for r in records} == expected and len(asked) == len(expected)
    assert all(r["judge_output"] == reply and r["judged"] == verdict for r in records)
    assert block["n_undecided"] == block["n_decided_by_judge"] == len(expected)
    # the rescored figures are the scorer's on the answers with exactly the judged ones replaced
    from sparsectx.eval.config import bench_spec_from
    from sparsectx.eval.protocol import load_bench_items, sample_id, scored_item

    spec = bench_spec_from(before["provenance"]["config"]["bench"][bench])
    items = load_bench_items(spec, 0.0).items
    answers = _answers(result)
    replaced = {i: (verdict if i in expected else a) for i, a in answers.items()}
    scored = [scored_item(it, spec, replaced[sample_id(it)]) for it in items]
    want = score_items(spec.scorer, scored, spec.headline).metrics
    assert block["metrics"] == want
    after = json.loads(result.read_text())
    assert after["judged"] == block and after["score"] == before["score"] and after["metrics"] == before["metrics"]


def _tiny_chat_model(directory: Path) -> Path:
    """Returns ``directory`` holding a random-weight Qwen2 chat model with a character-level tokenizer."""
    vocab = {tok: i for i, tok in enumerate([*SPECIALS, "<unk>", *string.printable])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    core.add_special_tokens(SPECIALS)
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.chat_template = TEMPLATE
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(vocab),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    Qwen2ForCausalLM(config).save_pretrained(directory)
    tok.save_pretrained(directory)
    return directory


def test_tiny_chat_model_judge_records_its_raw_output(tmp_path):
    model_dir = _tiny_chat_model(tmp_path / "judge")
    result = _leaf(tmp_path, "pope")
    before = json.loads(result.read_text())
    judge = JudgeConfig(backend="hf", model=str(model_dir), max_new_tokens=8)
    block = judge_result(_config(result, judge))
    records = [json.loads(line) for line in (result.parent / "pope.judge.jsonl").read_text().splitlines()]
    assert {r["id"] for r in records} == _ref_undecided("pope", result)
    tok = AutoTokenizer.from_pretrained(model_dir)  # as a user loads it (Qwen2Tokenizer from config.json here)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    for record in records:  # the reference: plain greedy generate on the recorded prompt
        ids = tok.apply_chat_template(
            [{"role": "user", "content": record["prompt"]}],
            add_generation_prompt=True,
            return_tensors="pt",
            return_dict=True,
        )["input_ids"]
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=8, do_sample=False)
        assert record["judge_output"] == tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
        assert record["judged"] == {"Yes": "Yes", "No": "No"}.get(ref_yorn_extraction(record["judge_output"]))
    decided = {r["id"] for r in records if r["judged"] is not None}
    assert block["n_decided_by_judge"] == len(decided)
    if not decided:  # a random judge decides nothing: the figures are the exact-matching ones
        assert block["metrics"] == before["metrics"]


class _Endpoint(BaseHTTPRequestHandler):
    seen: list[tuple[dict, str | None]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Endpoint.seen.append((body, self.headers.get("Authorization")))
        reply = json.dumps({"choices": [{"message": {"content": "No"}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args: object) -> None:
        return None


def test_openai_compatible_endpoint_judges_with_the_served_model(tmp_path, monkeypatch):
    server = HTTPServer(("127.0.0.1", 0), _Endpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("SPARSECTX_TEST_JUDGE_KEY", "sk-test")
    result = _leaf(tmp_path, "pope")
    judge = JudgeConfig(
        backend="openai",
        model="served-judge",
        base_url=f"http://127.0.0.1:{server.server_port}/v1",
        api_key_env="SPARSECTX_TEST_JUDGE_KEY",
    )
    _Endpoint.seen.clear()
    try:
        block = judge_result(_config(result, judge))
    finally:
        server.shutdown()
    assert len(_Endpoint.seen) == block["n_undecided"] == block["n_decided_by_judge"] > 0
    body, auth = _Endpoint.seen[0]
    assert body["model"] == "served-judge" and body["temperature"] == 0 and auth == "Bearer sk-test"


def test_unreachable_endpoint_names_the_url_and_writes_nothing(tmp_path):
    result = _leaf(tmp_path, "pope")
    before = result.read_bytes()
    judge = JudgeConfig(backend="openai", model="m", base_url="http://127.0.0.1:9/v1", timeout_s=2)
    with pytest.raises(RuntimeError, match=r"http://127\.0\.0\.1:9/v1/chat/completions gave no reply"):
        judge_result(_config(result, judge))
    assert result.read_bytes() == before and not (result.parent / "pope.judge.jsonl").exists()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"backend": "gpt"}, "judge.backend='gpt'"),
        ({"backend": "openai"}, "needs judge.base_url"),
        ({"backend": "openai", "base_url": "file:///etc/v1"}, r"judge\.base_url='file:///etc/v1'.*http or https"),
        ({"backend": "openai", "base_url": "127.0.0.1:8000/v1"}, r"judge\.base_url='127\.0\.0\.1:8000/v1'.*http"),
        (
            {"backend": "openai", "base_url": "https://u:p@h/v1", "api_key_env": "K"},
            r"judge\.base_url='https://<redacted>@h/v1' carries credentials.*judge\.api_key_env=K",
        ),
        ({"backend": "openai", "base_url": "http://h/v1", "api_key_env": ""}, r"judge\.api_key_env=''"),
    ],
)
def test_bad_judge_config_is_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        JudgeConfig(**{"model": "m", **kwargs})
