"""``model.answer_prefix``: text pre-filled after the generation prompt, read back as the start of the response.

LT-OPD (App. D.1) asks with "the same empty-thinking and open-answer assistant prefix used in training": on
Qwen3.5 that is the published template with thinking off (its generation prompt closes an empty
``<think>\\n\\n</think>\\n\\n`` block) followed by ``<answer>``. The prompt must end with exactly that, the
generated ``42</answer>`` must read as the answer ``42``, an evaluation row must hold the prefix once
(``prompt + output``), and the default "" must leave every prompt as the template alone renders it.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch
from engine_setup import default_engine
from family_models import published_checkpoint
from qwen3_5_models import tiny_qwen3_5
from tiny_models import noise_image

from sparsectx.data import Item
from sparsectx.data.config import PromptConfig
from sparsectx.encoding import encode_samples
from sparsectx.eval.checkpoints import eval_model_info
from sparsectx.eval.config import BenchSpec
from sparsectx.eval.extract import extract_answer
from sparsectx.eval.harness import harness_layout
from sparsectx.eval.protocol import generate_rows, prompt_item
from sparsectx.generation import SamplingConfig
from sparsectx.models import LoadedModel, ModelConfig, adapter_for
from sparsectx.models.loading import resolve_model_path
from sparsectx.models.processor import load_processor
from sparsectx.models.templates import find_chat_template, render
from sparsectx.prompting import chat_messages
from sparsectx.pruning.config import PrunerConfig

PREFIX = "<answer>"
TINY = "package:tiny-vlm"
PROMPT = PromptConfig(
    system="You are a helpful assistant.",
    instruction="First think step by step inside <think></think> tags, then give the final answer inside "
    "<answer></answer> tags.",
    mcq_hint="Answer with the option's letter.",
)


@pytest.fixture(scope="module")
def qwen35(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Returns a folder holding Qwen3.5-4B's published config, image processor and chat template."""
    return published_checkpoint("Qwen3.5-4B", tmp_path_factory.mktemp("qwen35"))


def _item(index: int) -> Item:
    buffer = io.BytesIO()
    noise_image(64, 64, seed=index).save(buffer, format="PNG")
    return Item(
        index=index,
        image_bytes=buffer.getvalue(),
        question=f"How many shapes are there {index}?",
        options={},
        answer="42",
        category="",
        family="",
        subset="",
        trace="",
        scene="",
        extra={},
    )


def _messages() -> list[dict]:
    return chat_messages(prompt_item(_item(0), harness_layout().prompt, PROMPT, with_image=True))


def _plain(folder: str | Path, switches: dict[str, bool]) -> str:
    """Returns the prompt the checkpoint's template alone renders (the rendering without the feature)."""
    processor = load_processor(folder)
    template = find_chat_template(folder, processor.tokenizer)
    return render(processor.tokenizer, template, _messages(), True, switches)


@pytest.mark.parametrize("thinking", [None, True, False])
def test_the_default_leaves_qwen35_prompts_byte_identical(qwen35: Path, thinking: bool | None) -> None:
    switches = {} if thinking is None else {"enable_thinking": thinking}
    processor = load_processor(qwen35, thinking=thinking)
    assert processor.answer_prefix == ""
    assert processor.apply_chat_template(_messages(), False, True) == _plain(qwen35, switches)
    assert processor.response("42</answer>") == "42</answer>"


def test_the_default_leaves_the_tiny_models_prompts_byte_identical() -> None:
    folder = resolve_model_path(TINY)
    assert load_processor(folder).apply_chat_template(_messages(), False, True) == _plain(folder, {})


def test_qwen35_thinking_off_ends_with_the_empty_thinking_block_then_the_open_answer(qwen35: Path) -> None:
    processor = load_processor(qwen35, thinking=False, answer_prefix=PREFIX)
    text = processor.apply_chat_template(_messages(), False, True)
    assert processor.generation_prefix == "<think>\n\n</think>\n\n"  # the published template's empty block
    assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n<answer>")
    assert text == _plain(qwen35, {"enable_thinking": False}) + PREFIX  # after all the template writes
    assert processor.prefilled == "<think>\n\n</think>\n\n<answer>"


def test_the_tiny_model_prompt_ends_with_the_open_answer_after_its_assistant_header() -> None:
    processor = load_processor(resolve_model_path(TINY), answer_prefix=PREFIX)
    text = processor.apply_chat_template(_messages(), False, True)
    assert text.endswith("<|im_start|>assistant\n<answer>")
    assert processor.prefilled == PREFIX  # the template opens nothing: the prefix is all that is pre-filled


def test_only_a_generation_prompt_gets_the_prefix(qwen35: Path) -> None:
    processor = load_processor(qwen35, thinking=False, answer_prefix=PREFIX)
    plain = render(processor.tokenizer, processor._template(), _messages(), False, {"enable_thinking": False})
    assert processor.apply_chat_template(_messages(), False, False) == plain


def test_tokenized_prompts_are_the_prefixed_texts_ids(qwen35: Path) -> None:
    processor = load_processor(qwen35, thinking=False, answer_prefix=PREFIX)
    text = processor.apply_chat_template(_messages(), False, True)
    ids = processor.apply_chat_template(_messages(), True, True)["input_ids"]
    assert ids == processor.tokenizer(text, add_special_tokens=False).input_ids


def test_the_generated_continuation_reads_as_a_tagged_answer(qwen35: Path) -> None:
    processor = load_processor(qwen35, thinking=False, answer_prefix=PREFIX)
    assert processor.response("42</answer>") == "<answer>42</answer>"
    assert extract_answer(processor.response("42</answer>")).strict == "42"
    assert extract_answer("42</answer>").strict is None  # without the prefix the tags are not matched


def test_results_record_the_answer_prefix() -> None:
    cfg = ModelConfig("tiny", TINY, "float32", "cpu", "sdpa", 8, "grouped", 1, 64, "auto", answer_prefix=PREFIX)
    info = eval_model_info(cfg, None)
    assert info["answer_prefix"] == PREFIX and info["generation_prefix"] == ""


def test_an_evaluation_row_holds_the_prefix_once_and_scores_it(qwen35: Path) -> None:
    """A tiny random-weight Qwen3.5 under the published template: the encoded prompt ends with the empty block
    and ``<answer>``, the row's output starts with ``<answer>`` (the prompt column stops before it), and the
    answer is extracted from that output."""
    processor = load_processor(qwen35, thinking=False, answer_prefix=PREFIX)
    model = tiny_qwen3_5(processor.tokenizer, seed=0)
    loaded = LoadedModel(adapter_for(model, signal_chunk=8), processor)
    items = [_item(0), _item(1)]
    layout = harness_layout()
    prompts = [prompt_item(item, layout.prompt, PROMPT, with_image=True) for item in items]
    samples = encode_samples(loaded.adapter, processor, prompts)
    tail = processor.tokenizer("<think>\n\n</think>\n\n<answer>", add_special_tokens=False).input_ids
    for sample in samples:
        assert sample.prompt_ids[-len(tail) :].tolist() == tail
    spec = BenchSpec("probe", "probe", None, "exact_match", 6, layout, "none", "none")
    sampling = SamplingConfig(6, False, 1.0, 1.0, 0, ["</answer>"])
    pruner = PrunerConfig("random", "pre_llm", {})
    with torch.no_grad():
        rows = generate_rows(loaded, items, spec, PROMPT, pruner, 1.0, 0, sampling, default_engine(), 2)
    for row in rows:
        assert row.status != "error", row.error
        assert row.prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
        turn = (row.prompt + row.output).rsplit("<|im_start|>assistant\n", 1)[1]  # the instruction names the tags
        assert row.output.startswith(PREFIX) and turn.count(PREFIX) == 1
        assert row.answer == extract_answer(row.output).lenient
