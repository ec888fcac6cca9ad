"""lmms-eval model adapter: ``SparsectxLMM``, an ``lmms_eval.api.model.lmms`` over a sparsectx checkpoint +
pruner + budget; runs only in lmms-eval's environment (``make lmms-env``), never imported by sparsectx.

Registered as model ``sparsectx`` through lmms-eval's entry-point group ``lmms_eval.models``
(``pyproject.toml``, ``sparsectx.integrations.lmms_eval_entry``)::

    .lmms-env/bin/lmms-eval --model sparsectx --tasks mme \
        --model_args model=tiny,pruner=visionzip,budget=0.1,bench=mme --batch_size 1

``--model_args`` take ``model``, ``checkpoint``, ``pruner``, ``budget``, ``seed`` and ``overrides`` (any
further ``src/evaluate.py`` overrides, space-separated: lmms-eval splits the arguments on commas), plus
``bench`` (the project benchmark whose pruner seeds and ``max_new_tokens`` apply), ``max_new_tokens`` and
``return_output``. Each request's text (the task's ``doc_to_text``) is the question as the model sees it
and goes into the project's prompt (system message, image, question, think/answer instruction). Decoding is
the project's (greedy, stop at ``</answer>``), whatever the task's ``generation_kwargs`` say, except its
``max_new_tokens``, which caps generation when neither ``max_new_tokens`` nor a configured ``bench`` does
(the cap changes greedy text: ``HarnessModel.max_new_tokens``). ``generate_until`` answers with the
extracted answer (``return_output=true``: the raw generation). ``loglikelihood`` is not offered: the
papers' benchmarks are scored on generated answers, and a pruned context has no single likelihood to
report for lmms-eval's multiple-choice-by-likelihood tasks.
"""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path
from typing import Any

from lmms_eval.api.instance import Instance
from lmms_eval.api.model import lmms
from PIL import Image

from sparsectx.data.media import decode_image
from sparsectx.eval.harness import DEFAULT_MAX_NEW_TOKENS, HarnessModel, text_item


def _png(image: Any) -> bytes:
    """Returns PNG bytes of a task visual (a PIL image, or a path decoded within the media limits:
    ``sparsectx.data.media``); PNG keeps the pixels exact."""
    if not isinstance(image, Image.Image):
        image = decode_image(Path(image), f"task visual {image}")
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="PNG")
    return buffer.getvalue()


def _flag(value: Any) -> bool:
    """Returns a ``--model_args`` boolean (lmms-eval passes "true"/"false" strings or parsed bools)."""
    return value if isinstance(value, bool) else str(value).strip().lower() in ("1", "true", "yes")


class SparsectxLMM(lmms):
    """A sparsectx model under lmms-eval: one image per request, one request per engine call."""

    def __init__(
        self,
        model: str = "tiny",
        checkpoint: str | None = None,
        pruner: str | None = None,
        budget: float | None = None,
        seed: int | None = None,
        overrides: str = "",
        bench: str | None = None,
        max_new_tokens: int | None = None,
        return_output: bool = False,
        **kwargs: Any,
    ) -> None:
        """Loads the model of ``evaluate.py model=<model> [checkpoint=...] [pruner=...] [budget=...] <overrides>``;
        lmms-eval's own arguments (``batch_size``, ``device``) are accepted and ignored (the config decides)."""
        super().__init__()
        unknown = sorted(set(kwargs) - {"batch_size", "device", "max_batch_size"})
        if unknown:
            raise TypeError(f"SparsectxLMM got unknown model_args {unknown}")
        named = {"model": model, "checkpoint": checkpoint, "pruner": pruner, "budget": budget, "seed": seed}
        args = [f"{key}={value}" for key, value in named.items() if value is not None]
        extra = str(overrides).strip().strip("'\"").split()  # lmms-eval keeps the quotes that protect commas
        self.model = HarnessModel.from_overrides([*args, *extra])
        self.bench = bench
        self.cap = None if max_new_tokens is None else int(max_new_tokens)
        self.return_output = _flag(return_output)

    def _cap(self, gen_kwargs: dict[str, Any]) -> int:
        """Returns the generation cap: ``max_new_tokens``, else the configured bench's, else the task's."""
        if self.cap is not None:
            return self.cap
        if self.bench is not None and self.bench in self.model.cfg.bench:
            return self.model.max_new_tokens(self.bench)
        return int(gen_kwargs.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS))

    def generate_until(self, requests: list[Instance]) -> list[str]:
        """Returns one answer per request, generated as ``evaluate.py`` generates (see the module doc)."""
        out = []
        for context, gen_kwargs, doc_to_visual, doc_id, task, split in (req.args for req in requests):
            doc = self.task_dict[task][split][doc_id]
            visuals = doc_to_visual(doc)
            visual = visuals[0] if isinstance(visuals, list) else visuals
            index = doc.get("index", doc_id) if isinstance(doc, dict) else doc_id
            item = replace(
                text_item(_png(visual), context), index=int(index) if str(index).isdigit() else index
            )
            (row,) = self.model.generate([item], self.bench or task, self._cap(gen_kwargs))
            if row.status == "error":
                raise RuntimeError(f"sparsectx generation failed on {task} doc {doc_id}: {row.error}")
            answer = row.output if self.return_output else (row.answer or "")
            self.cache_hook.add_partial("generate_until", (context, gen_kwargs), answer)
            out.append(answer)
        return out

    def generate_until_multi_round(self, requests: list[Instance]) -> list[str]:
        """Raises: the project's protocol is one question per image."""
        raise NotImplementedError("SparsectxLMM answers single-round requests only (generate_until)")

    def loglikelihood(self, requests: list[Instance]) -> list[tuple[float, bool]]:
        """Raises: scoring is on generated answers (see the module doc)."""
        raise NotImplementedError(
            "SparsectxLMM does not compute loglikelihood: use a generate_until task (the papers' benchmarks are "
            "scored on generated answers)"
        )
