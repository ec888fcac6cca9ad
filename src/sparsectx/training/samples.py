"""The training rollout table: a few rollouts per logged step, each beside its teacher's full-context answer.

Every ``sample_table_every`` steps the loop logs ``rollouts``: the first ``logger.rollout_rows`` samples of
the step (over all its micro-batches), with the image, the question, the student's answer (its rollout at
budget b, or the reference prefix for fixed-prefix methods), the teacher's greedy answer from the full visual
context, the reference answer, whether each answer is correct, and the visual tokens kept of all. With
``method.rollouts_per_prompt`` = k > 1 a sample is a prompt and its row shows the first of its k rollouts.

The teacher's answer is decoded by the one decode engine (``sparsectx.engine``) inside the method's teacher
view (``sparsectx.training.teachers``), greedily, with the rollout's length cap and stop strings, from the
teacher's own prompt (SCOPD+GT's holds the reference). A method without a teacher (SFT) shows the current
student at full context instead. Only the logged rows are decoded, only on logging steps, by an engine of
their own without CUDA graphs: a graph captured by the rollouts' kept engine (``engine_for``) would replay
the student's weights inside a teacher view that only switches LoRA adapters off in Python, and a graph
captured here would do the reverse to later rollouts.
"""

from __future__ import annotations

import dataclasses
from contextlib import ExitStack
from typing import Any

import torch

from sparsectx.context import keep_all
from sparsectx.encoding import EncodedSample
from sparsectx.engine import DecodeEngine, pruned_prompts
from sparsectx.training.contexts import MicroBatch
from sparsectx.training.memory import on_device
from sparsectx.training.rollout import is_correct
from sparsectx.training.student import mode
from sparsectx.training.teachers import TEACHERS
from sparsectx.training.update import Trainer

TABLE_COLUMNS = [
    "step",
    "sample_id",
    "image",
    "question",
    "student_answer",
    "teacher_full_answer",
    "reference",
    "student_correct",
    "teacher_correct",
    "kept_visual",
    "visual_tokens",
    "budget",
]
"""Columns of the ``rollouts`` table (``teacher_full_answer``: the teacher's greedy answer at budget 1)."""


def teacher_answers(trainer: Trainer, samples: list[EncodedSample]) -> list[str]:
    """Returns the teacher's greedy response to each prompt from its full visual context (no_grad, eval mode),
    read as the student's are (``ChatTemplating.response``: after the answer prefix)."""
    cfg, student = trainer.cfg, trainer.student
    kind = cfg.method.teacher.kind
    view = TEACHERS.get("shared" if kind == "none" else kind)
    greedy = dataclasses.replace(cfg.method.rollout.sampling(cfg.max_new_tokens), do_sample=False)
    eager = dataclasses.replace(cfg.engine, cuda_graphs="off")
    with ExitStack() as stack:
        if cfg.memory.teacher_offload and student.frozen is not None:  # the frozen copy waits on the CPU
            stack.enter_context(on_device(student.frozen.model, student.model.device))
        stack.enter_context(torch.no_grad())
        adapter = stack.enter_context(view(student))
        stack.enter_context(mode(adapter.model, training=False))
        stack.enter_context(student.compute())
        prompts = pruned_prompts(adapter, samples, [keep_all(s) for s in samples])
        outs = DecodeEngine(adapter, student.processor.tokenizer, eager).generate(prompts, greedy)
    return [student.processor.response(out.text) for out in outs]


def sample_rows(trainer: Trainer, step: int, budget: float, micro: list[MicroBatch]) -> list[list[Any]]:
    """Returns the ``rollouts`` rows of one step: its first ``logger.rollout_rows`` samples (``TABLE_COLUMNS``),
    one rollout (the first) of each prompt."""
    stride = trainer.cfg.method.rollouts_per_prompt
    picks = [(mb, i) for mb in micro for i in range(0, len(mb.items), stride)][: trainer.cfg.logger.rollout_rows]
    teacher = teacher_answers(trainer, [mb.teacher_encoded[i] for mb, i in picks])
    rows = []
    for (mb, i), full in zip(picks, teacher, strict=True):
        item, text = mb.items[i], mb.prefix.texts[i]
        kept = sum(s.indices.numel() for s in mb.selections[i])
        total = sum(image.num_tokens for image in mb.encoded[i].images)
        rows.append(
            [
                step,
                mb.encoded[i].sample_id,
                item.image(),
                item.question,
                text,
                full,
                item.answer,
                is_correct(text, item),
                is_correct(full, item),
                kept,
                total,
                budget,
            ]
        )
    return rows
