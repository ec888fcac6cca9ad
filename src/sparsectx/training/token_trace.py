"""Per-token traces of the untrained and the trained student along their rollouts (SCOPD Fig. 2a, Fig. 6).

With ``token_trace`` = N > 0 the loop traces two optimizer steps: the first (the student before any update: the
untrained model) and the last (the student after ``steps`` − 1 updates: the trained model, one update short of
the exported checkpoint). Of each, the main process's first N rollouts (micro-batches in order) are written,
one JSON line per rollout, to ``<run>/token_traces.jsonl`` (``sparsectx.paths.token_trace_path``), with per
response token:

* ``kl``: KL(q‖p^b) = Σ_v q_v (log q_v − log p^b_v), the expectation over the TEACHER q (SCOPD Eq. 4), on the
  full vocabulary at ``method.divergence.temperature``, whatever top-K the loss uses; None without a teacher
  (SFT, RL);
* ``sensitivity``: S = JSD_0.5(p^b, p^{b+δ}) (SCOPD Eq. 7), the step's own probe values, in [0, ln 2]; None
  when the method has no b+δ probe;
* ``selected``: whether the step distilled the position (``method.positions``).

Everything is computed under ``no_grad`` from the logits the step already holds; the loss does not change.
A line's keys (``TRACE_KEYS``): ``step`` (the optimizer step as ``steps.jsonl`` numbers it, 1 = untrained),
``rollout`` (0..N−1 within the step), ``item`` (the training sample id, ``<row>@<position>``), ``index`` (the
TSV row), ``position`` (the global sample position), ``budget``, ``question``, ``reference``, ``response`` (the
rollout's text as rewards read it), ``stopped``, ``fraction`` (ρ of ``method.positions``, None for all),
``temperature``, ``token_ids``, ``tokens`` (each id decoded alone), ``kl``, ``sensitivity``, ``selected``
(lists of one length T_i). A resumed run cuts the file back to its state's steps first (``loop.trim_step_log``),
so a step redone after a kill is written once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from sparsectx.training.config import TrainConfig
from sparsectx.training.contexts import MicroBatch
from sparsectx.training.divergences import forward_kl

TRACE_KEYS = (
    "step",
    "rollout",
    "item",
    "index",
    "position",
    "budget",
    "question",
    "reference",
    "response",
    "stopped",
    "fraction",
    "temperature",
    "token_ids",
    "tokens",
    "kl",
    "sensitivity",
    "selected",
)
"""The keys of every line of ``token_traces.jsonl``."""


def traced_step(step: int, steps: int) -> bool:
    """Returns whether the optimizer step that starts after ``step`` updates is traced: the first or the last."""
    return step == 0 or step == steps - 1


def token_kl(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    mask: torch.Tensor,
    *,
    chunk_size: int,
    temperature: float,
) -> torch.Tensor:
    """Returns (B, T) fp32 KL(q‖p) = Σ_v q_v (log q_v − log p_v) over the full vocabulary (SCOPD Eq. 4), no grad.

    Args:
        student_logits: (B, T, V) the student's logits at budget b on the rollout prefix (p).
        teacher_logits: (B, T, V) the teacher's logits on the same prefix (q).
        mask: (B, T) bool valid response positions; others return 0.
        chunk_size: positions per fp32 chunk.
        temperature: the loss temperature applied to both.
    """
    with torch.no_grad():
        return forward_kl(
            student_logits=student_logits.detach(),
            teacher_logits=teacher_logits.detach(),
            mask=mask,
            sampled_ids=None,
            top_k=None,
            chunk_size=chunk_size,
            temperature=temperature,
        )


def token_pieces(tokenizer: Any, ids: list[int]) -> list[str]:
    """Returns each token id decoded on its own (special tokens kept), the text a token strip shows."""
    return [tokenizer.decode([i], skip_special_tokens=False) for i in ids]


@dataclass
class TokenTrace:
    """The traced rollouts of one optimizer step, filled micro-batch by micro-batch (main process only)."""

    step: int
    """The optimizer step as ``steps.jsonl`` numbers it (the number of updates after it)."""
    rollouts: int
    """N: rollouts traced (``token_trace``)."""
    lines: list[dict[str, Any]] = field(default_factory=list)
    """The lines so far, without ``budget`` (``records`` adds it)."""

    def add(
        self,
        cfg: TrainConfig,
        tokenizer: Any,
        mb: MicroBatch,
        s_logits: torch.Tensor,
        t_logits: torch.Tensor | None,
        sensitivity: torch.Tensor | None,
        selected: torch.Tensor,
    ) -> None:
        """Returns None after tracing the micro-batch's first rollouts while fewer than ``rollouts`` are traced.

        Args:
            cfg: the run config (the divergence's chunk size and temperature, ρ).
            tokenizer: decodes the token pieces.
            mb: the micro-batch.
            s_logits: (B, T, V) the student's logits at budget b.
            t_logits: (B, T, V) the teacher's logits, or None (no teacher).
            sensitivity: (B, T) the step's S (SCOPD Eq. 7), or None (no probe).
            selected: (B, T) bool positions the step distils.
        """
        count = min(self.rollouts - len(self.lines), len(mb.items))
        if count <= 0:
            return
        div = cfg.method.divergence
        kl = None
        if t_logits is not None:
            kl = token_kl(
                s_logits[:count],
                t_logits[:count],
                mb.valid[:count],
                chunk_size=div.chunk_size,
                temperature=div.temperature,
            ).cpu()
        sens = None if sensitivity is None else sensitivity[:count].detach().float().cpu()
        for i in range(count):
            length = int(mb.valid[i].sum())
            ids = mb.ids[i, :length].tolist()
            item = mb.items[i]
            self.lines.append(
                {
                    "step": self.step,
                    "rollout": len(self.lines),
                    "item": mb.encoded[i].sample_id,
                    "index": item.index,
                    "position": mb.positions[i],
                    "question": item.question,
                    "reference": item.answer,
                    "response": mb.prefix.texts[i],
                    "stopped": bool(mb.prefix.stopped[i]),
                    "fraction": cfg.method.positions.fraction,
                    "temperature": div.temperature,
                    "token_ids": ids,
                    "tokens": token_pieces(tokenizer, ids),
                    "kl": None if kl is None else kl[i, :length].tolist(),
                    "sensitivity": None if sens is None else sens[i, :length].tolist(),
                    "selected": selected[i, :length].tolist(),
                }
            )

    def records(self, budget: float) -> list[dict[str, Any]]:
        """Returns the step's lines with its student ``budget`` (``TRACE_KEYS``)."""
        return [{**line, "budget": budget} for line in self.lines]


def step_trace(rollouts: int, step: int, steps: int, main: bool) -> TokenTrace | None:
    """Returns the collector of the optimizer step that starts after ``step`` updates, or None when it is not
    traced (``token_trace`` 0, not the first or last step, or not the main process)."""
    if rollouts == 0 or not main or not traced_step(step, steps):
        return None
    return TokenTrace(step + 1, rollouts)
