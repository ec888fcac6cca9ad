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
and goes into the project's prompt (system message, every image of the request in order, question,
think/answer instruction): a multi-image request (MUIRBench, BLINK) reaches the model with all its images,
as ``evaluate.py`` asks a multi-image row (``Item.more_images``). Decoding is the project's (greedy, stop at
``</answer>``), whatever the task's ``generation_kwargs`` say, except its ``max_new_tokens``, which caps
generation when neither ``max_new_tokens`` nor a configured ``bench`` does (the cap changes greedy text:
``HarnessModel.max_new_tokens``). ``generate_until`` answers with the extracted answer
(``return_output=true``: the raw generation). ``loglikelihood`` is not offered: the papers' benchmarks are
scored on generated answers, and a pruned context has no single likelihood to report for lmms-eval's
multiple-choice-by-likelihood tasks.

Batching: ``--batch_size N`` groups the requests as lmms-eval's own models do (``lmms_eval.utils.Collator``,
as in lmms_eval/models/simple/qwen2_5_vl.py ``Qwen2_5_VL.generate_until``; here grouped by task, split and
generation kwargs, so one call has one pruner-seed benchmark and one cap) and makes one
``HarnessModel.generate`` call per group of N; the engine decodes up to the evaluation config's
``batch_size`` of them at a time (``overrides='batch_size=...'``), refilling finished slots. Greedy
answers do not depend on either size (the tests compare ``--batch_size 3`` with ``evaluate.py``, whose
answers equal the one-request-per-call ones). ``--batch_size auto`` (or ``auto:N``) uses the config's
``batch_size``.
"""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from lmms_eval.api.instance import Instance
from lmms_eval.api.model import lmms
from lmms_eval.utils import Collator
from loguru import logger
from PIL import Image

from sparsectx.data import Item
from sparsectx.data.media import decode_image
from sparsectx.eval.harness import DEFAULT_MAX_NEW_TOKENS, HarnessModel, text_item

VIDEO_SUFFIXES = (".mp4", ".avi", ".mov", ".mkv", ".webm")
"""File names lmms-eval's models take as videos (lmms_eval/models/simple/qwen2_5_vl.py ``generate_until``)."""


def _png(image: Any, where: str) -> bytes:
    """Returns PNG bytes of a task visual (a PIL image, or an image file decoded within the media limits:
    ``sparsectx.data.media``); PNG keeps the pixels exact. Raises naming ``where`` for a video or other media."""
    if isinstance(image, str) and image.lower().endswith(VIDEO_SUFFIXES):
        raise ValueError(
            f"{where} is a video ({image}); SparsectxLMM answers image questions: evaluate the project's video "
            "benchmarks with src/evaluate.py (docs/harnesses.md)"
        )
    if not isinstance(image, (Image.Image, str, Path)):
        raise ValueError(f"{where} is a {type(image).__name__}, not an image; SparsectxLMM answers image questions")
    if not isinstance(image, Image.Image):
        image = decode_image(Path(image), f"{where} ({image})")
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="PNG")
    return buffer.getvalue()


def _group(args: tuple[Any, ...]) -> dict[str, str]:
    """Returns the group of a request's arguments ``(context, gen_kwargs, doc_to_visual, doc_id, task, split)``:
    its task, split and generation kwargs (as text: ``Collator.group`` hashes the values)."""
    return {"task": args[4], "split": args[5], "gen_kwargs": json.dumps(args[1], sort_keys=True, default=str)}


def _doc_id(args: tuple[Any, ...]) -> Any:
    """Returns a request's doc id: the order of requests within a group."""
    return args[3]


def group_size(batch_size: Any, configured: int) -> int:
    """Returns how many requests one ``HarnessModel.generate`` call takes: lmms-eval's ``--batch_size`` (a number,
    or ``auto``/``auto:N``, which take the evaluation config's ``batch_size``, ``configured``)."""
    text = str(batch_size).strip().lower()
    if text.startswith("auto"):
        return configured
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"--batch_size {batch_size!r}: give a whole number >= 1, or auto")
    return int(text)


def _flag(value: Any) -> bool:
    """Returns a ``--model_args`` boolean (lmms-eval passes "true"/"false" strings or parsed bools)."""
    return value if isinstance(value, bool) else str(value).strip().lower() in ("1", "true", "yes")


class SparsectxLMM(lmms):
    """A sparsectx model under lmms-eval: every image of a request, ``--batch_size`` requests per engine call."""

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
        batch_size: int | str = 1,
        **kwargs: Any,
    ) -> None:
        """Loads the model of ``evaluate.py model=<model> [checkpoint=...] [pruner=...] [budget=...] <overrides>``;
        ``batch_size`` (lmms-eval's ``--batch_size``) sets the requests per engine call, lmms-eval's ``device``
        and ``max_batch_size`` are accepted and ignored (the config decides)."""
        super().__init__()
        unknown = sorted(set(kwargs) - {"device", "max_batch_size"})
        if unknown:
            raise TypeError(f"SparsectxLMM got unknown model_args {unknown}")
        named = {"model": model, "checkpoint": checkpoint, "pruner": pruner, "budget": budget, "seed": seed}
        args = [f"{key}={value}" for key, value in named.items() if value is not None]
        extra = str(overrides).strip().strip("'\"").split()  # lmms-eval keeps the quotes that protect commas
        self.model = HarnessModel.from_overrides([*args, *extra])
        self.group = group_size(batch_size, self.model.cfg.batch_size)
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

    def _item(self, context: str, doc_to_visual: Any, doc_id: int, task: str, split: str) -> Item:
        """Returns the project's ``Item`` of one request: every visual of its doc, its text as the question, its
        doc's ``index`` (else the doc id) as the id that seeds a random pruner."""
        doc = self.task_dict[task][split][doc_id]
        visuals = doc_to_visual(doc)
        visuals = list(visuals) if isinstance(visuals, (list, tuple)) else [visuals]
        if not [visual for visual in visuals if visual is not None]:
            raise ValueError(
                f"task {task} doc {doc_id} has no image (doc_to_visual gave none); SparsectxLMM asks questions "
                "about images"
            )
        images = [_png(visual, f"task {task} doc {doc_id} visual {n}") for n, visual in enumerate(visuals)]
        index = doc.get("index", doc_id) if isinstance(doc, dict) else doc_id
        return replace(text_item(images[0], context, images[1:]), index=int(index) if str(index).isdigit() else index)

    def generate_until(self, requests: list[Instance]) -> list[str]:
        """Returns one answer per request, in the requests' order, generated as ``evaluate.py`` generates (see
        the module doc): one ``HarnessModel.generate`` call per group of ``batch_size`` requests."""
        collator = Collator([req.args for req in requests], _doc_id, _group, grouping=True)
        answers, calls = [], 0
        for chunk in collator.get_batched(n=self.group):
            contexts, all_gen_kwargs, doc_to_visual, doc_ids, tasks, splits = zip(*chunk, strict=True)
            items = [self._item(*args) for args in zip(contexts, doc_to_visual, doc_ids, tasks, splits, strict=True)]
            rows = self.model.generate(items, self.bench or tasks[0], self._cap(all_gen_kwargs[0]))
            calls += 1
            for context, gen_kwargs, doc_id, row in zip(contexts, all_gen_kwargs, doc_ids, rows, strict=True):
                if row.status == "error":
                    raise RuntimeError(f"sparsectx generation failed on {tasks[0]} doc {doc_id}: {row.error}")
                answer = row.output if self.return_output else (row.answer or "")
                self.cache_hook.add_partial("generate_until", (context, gen_kwargs), answer)
                answers.append(answer)
        logger.info(
            f"SparsectxLMM: {len(requests)} requests in {calls} HarnessModel.generate calls (batch_size {self.group})"
        )
        return collator.get_original(answers)

    def generate_until_multi_round(self, requests: list[Instance]) -> list[str]:
        """Raises: the project's protocol is one question per image."""
        raise NotImplementedError("SparsectxLMM answers single-round requests only (generate_until)")

    def loglikelihood(self, requests: list[Instance]) -> list[tuple[float, bool]]:
        """Raises: scoring is on generated answers (see the module doc)."""
        raise NotImplementedError(
            "SparsectxLMM does not compute loglikelihood: use a generate_until task (the papers' benchmarks are "
            "scored on generated answers)"
        )
