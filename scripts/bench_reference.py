"""The plain-HF reference of a SCOPD / SCOPD+ step that ``bench_train_step.py`` times beside the project's.

What a researcher writes with transformers and peft alone: the processor and ``get_image_features`` for the
vision tower (HF's own attention), ``generate`` with the default DynamicCache for the rollouts, plain forward
passes with ``logits_to_keep`` for the teacher (adapters disabled), the LoRA student (gradients) and the
SCOPD+ probe, the KL and sensitivity over the full vocabulary, then AdamW over the adapters. HF cannot keep
pruned tokens at their unpruned positions, so the language-model passes run text prompts of the same lengths
as the project's contexts (cost depends on lengths, not on content), and the vision features are computed
and then left unused, as the dense reference in ``../shared/specs/engine.md`` §2 does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from peft import PeftModel
from peft.tuners.tuners_utils import BaseTunerLayer
from transformers import GenerationConfig

from sparsectx.prompting import PromptItem, build_prompts, processor_inputs


@dataclass
class ReferenceShape:
    """The lengths one reference step runs at, taken from the project's own contexts of the same items.

    Attributes:
        student: prompt tokens of the student's context (text + kept visual tokens at b).
        teacher: prompt tokens of the teacher's context (text + every visual token).
        probe: prompt tokens of the b+δ probe context; None without a probe (SCOPD).
        new_tokens: rollout length.
        fraction: ρ, the share of positions distilled (None = every position).
        do_sample: whether rollouts sample.
    """

    student: int
    teacher: int
    probe: int | None
    new_tokens: int
    fraction: float | None
    do_sample: bool


def text_ids(batch: int, length: int, vocab: int, device: torch.device) -> torch.Tensor:
    """Returns (batch, length) random plain-text ids (no special or image ids)."""
    return torch.randint(vocab // 8, vocab // 2, (batch, length), device=device)


def response_logits(model: torch.nn.Module, prompt: torch.Tensor, response: torch.Tensor) -> torch.Tensor:
    """Returns (B, T, V) logits predicting ``response`` after ``prompt``; the LM head runs on T+1 rows only."""
    ids = torch.cat([prompt, response], dim=1)
    logits = model(input_ids=ids, logits_to_keep=response.shape[1] + 1).logits
    return logits[:, :-1]


def sensitivity_jsd(student: torch.Tensor, probe: torch.Tensor) -> torch.Tensor:
    """Returns (B, T) JSD_0.5 between two logit tensors over the full vocabulary (fp32, per sequence)."""
    rows = []
    for s, p in zip(student, probe, strict=True):
        log_s, log_p = F.log_softmax(s.float(), -1), F.log_softmax(p.float(), -1)
        log_m = torch.logsumexp(torch.stack([log_s, log_p]), 0) - math.log(2.0)
        kl_s = (log_s.exp() * (log_s - log_m)).sum(-1)
        kl_p = (log_p.exp() * (log_p - log_m)).sum(-1)
        rows.append(0.5 * (kl_s + kl_p))
    return torch.stack(rows)


def forward_kl(student: torch.Tensor, teacher: torch.Tensor, selected: torch.Tensor) -> torch.Tensor:
    """Returns the mean over sequences of the per-sequence mean KL(teacher‖student) on ``selected``."""
    s = F.log_softmax(student[selected].float(), -1)
    t = F.log_softmax(teacher[selected].float(), -1)
    per_position = (t.exp() * (t - s)).sum(-1)
    seq = torch.arange(selected.shape[0], device=selected.device)[:, None].expand_as(selected)[selected]
    sums = torch.zeros(selected.shape[0], device=s.device).index_add(0, seq, per_position)
    return (sums / selected.sum(-1).clamp(min=1)).mean()


@contextmanager
def peft_defaults(peft: PeftModel) -> Iterator[None]:
    """Runs the block with peft's own default of casting each adapter input to fp32 (the project skips it)."""
    layers = [m for m in peft.modules() if isinstance(m, BaseTunerLayer)]
    before = [m.cast_input_dtype_enabled for m in layers]
    for module in layers:
        module.cast_input_dtype_enabled = True
    try:
        yield
    finally:
        for module, value in zip(layers, before, strict=True):
            module.cast_input_dtype_enabled = value


@contextmanager
def hf_vision_attention(model: torch.nn.Module) -> Iterator[None]:
    """Runs the block with the vision tower on HF's own sdpa attention (the project routes it elsewhere)."""
    before = model.config.vision_config._attn_implementation
    model.set_attn_implementation({"vision_config": "sdpa"})
    try:
        yield
    finally:
        model.set_attn_implementation({"vision_config": before})


def reference_step(
    peft: PeftModel,
    processor,
    build: Callable[[object], PromptItem],
    rows: list,
    shape: ReferenceShape,
    optimizer: torch.optim.Optimizer,
    phase: Callable[[str], object],
) -> None:
    """Runs one plain-HF SCOPD(+) step; ``phase(name)`` is a context timing each part.

    The prompts are ``build(row)`` for each row, built inside the step (their images decoded on the
    processor's threads, as the project does) so both sides pay the same image decoding.
    """
    with peft_defaults(peft):
        _step(peft, processor, build, rows, shape, optimizer, phase)


def _step(peft, processor, build, rows, shape, optimizer, phase) -> None:  # noqa: ANN001
    """The body of ``reference_step``."""
    model = peft.base_model.model
    device, batch = model.device, len(rows)
    vocab = model.config.get_text_config().vocab_size
    autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    with phase("encode"), torch.no_grad(), hf_vision_attention(model):
        prompts = build_prompts(build, rows, processor.image_workers)
        inputs = processor_inputs(processor, prompts)
        pixels = inputs["pixel_values"].to(device, model.dtype)
        model.model.get_image_features(pixel_values=pixels, image_grid_thw=inputs["image_grid_thw"].to(device))
    student_ids = text_ids(batch, shape.student, vocab, device)
    with phase("rollout"), torch.no_grad(), autocast:
        config = GenerationConfig(
            max_new_tokens=shape.new_tokens,
            min_new_tokens=shape.new_tokens,
            do_sample=shape.do_sample,
            eos_token_id=None,
            pad_token_id=0,
        )
        out = peft.generate(
            input_ids=student_ids, attention_mask=torch.ones_like(student_ids), generation_config=config
        )
        response = out[:, shape.student :]
    with phase("teacher"), torch.no_grad(), autocast, peft.disable_adapter():
        teacher = response_logits(peft, text_ids(batch, shape.teacher, vocab, device), response)
    peft.train()
    with phase("student"), autocast:
        student = response_logits(peft, student_ids, response)
    peft.eval()
    selected = torch.ones(response.shape, dtype=torch.bool, device=device)
    if shape.probe is not None:
        with phase("probe"), torch.no_grad(), autocast:
            probe = response_logits(peft, text_ids(batch, shape.probe, vocab, device), response)
            scores = sensitivity_jsd(student.detach(), probe)
            k = math.ceil(shape.fraction * shape.new_tokens)
            top = scores.topk(k, dim=-1).indices
            selected = torch.zeros_like(selected).scatter(1, top, True)
    with phase("loss+backward+update"):
        forward_kl(student, teacher, selected).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
