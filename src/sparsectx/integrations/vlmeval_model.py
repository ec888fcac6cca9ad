"""VLMEvalKit model adapter: ``SparsectxVLM``, a ``vlmeval.vlm.base.BaseModel`` over a sparsectx checkpoint
+ pruner + budget; runs only in VLMEvalKit's environment (``make vlmeval-env``), never imported by sparsectx.

VLMEvalKit's own ``run.py`` finds it (``sparsectx.integrations.vlmeval_register``, which ``make vlmeval-env``
installs): as ``"class": "SparsectxVLM"`` in a ``--config`` file, and by name with ``--model <name>`` for the
models listed in ``$SPARSECTX_VLMEVAL_MODELS``::

    .vlmeval-env/bin/python -m vlmeval.run --config cfg.json --judge exact_matching

with ``cfg.json`` = ``{"model": {"sparsectx_tiny": {"class": "SparsectxVLM", "overrides": ["model=tiny",
"pruner=visionzip", "budget=0.1"]}}, "data": {"MME": {"class": "ImageYORNDataset", "dataset": "MME"}}}``.
``overrides`` are ``src/evaluate.py``'s (``checkpoint=<dir>`` for a trained model). The adapter builds the
project's prompt from each row (``use_custom_prompt`` is always true: system message, every image of the row
in order, question with lettered options and the hint line, the think/answer instruction) and keeps the
row's image bytes as the file holds them (VLMEvalKit's dumped copy is re-encoded as JPEG), so an item gets
the answer ``evaluate.py`` gives it; a multi-image row (MUIRBench, BLINK) is asked with all its images, as
``evaluate.py`` asks it (``Item.more_images``). ``generate`` returns the extracted answer
(``return_output=true``: the raw generation), which VLMEvalKit's exact matching then reads as the project's
scorer reads it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from vlmeval.vlm.base import BaseModel

from sparsectx.data import Item
from sparsectx.eval.harness import HarnessModel, formatted, images_of, item_from_row, text_item


class SparsectxVLM(BaseModel):
    """A sparsectx model under VLMEvalKit: every image of a message, placed before its text (``INTERLEAVE``:
    several images per message are taken, vlmeval/tools.py ``check``)."""

    INTERLEAVE = True

    def __init__(
        self,
        overrides: list[str] | None = None,
        bench: str | None = None,
        max_new_tokens: int | None = None,
        return_output: bool = False,
        **kwargs: Any,
    ) -> None:
        """Loads the model of ``evaluate.py <overrides>``.

        ``bench`` names the project benchmark whose pruner seeds a random pruner uses and whose
        ``max_new_tokens`` caps generation (default: the VLMEvalKit dataset name; the cap is then 1024 unless
        ``max_new_tokens`` is given).
        """
        super().__init__()
        if kwargs:
            raise TypeError(f"SparsectxVLM got unknown arguments {sorted(kwargs)}")
        self.model = HarnessModel.from_overrides(overrides or [])
        self.bench, self.max_new_tokens, self.return_output = bench, max_new_tokens, return_output
        self._rows: dict[tuple[tuple[str, ...], str], Item] = {}

    def use_custom_prompt(self, dataset: str) -> bool:
        """Returns True: every dataset gets the project's prompt, so scores match ``evaluate.py``."""
        return True

    def build_prompt(self, line: Any, dataset: str | None = None) -> list[dict[str, str]]:
        """Returns VLMEvalKit's message for a row (image paths, then the project's question text) and keeps the
        row as the project's ``Item`` (every image as the file holds it) for ``generate_inner``."""
        row = dict(line)
        paths = tuple(self.dump_image(line, dataset))
        images = images_of(row["image"]) if "image" in row else [Path(path).read_bytes() for path in paths]
        item = replace(item_from_row(row, images[0]), more_images=tuple(images[1:]))
        item = formatted(item, self.model.cfg.prompt.mcq_hint)
        self._rows[(paths, item.question)] = item
        return [*({"type": "image", "value": p} for p in paths), {"type": "text", "value": item.question}]

    def generate_inner(self, message: list[dict[str, str]], dataset: str | None = None) -> str:
        """Returns the model's answer to one message: the extracted answer, or the raw output."""
        paths = tuple(m["value"] for m in message if m["type"] == "image")
        text = "\n".join(m["value"] for m in message if m["type"] == "text")
        item = self._rows.pop((paths, text), None)
        if item is None and not paths:
            raise ValueError(f"dataset {dataset} sent a message without an image; SparsectxVLM answers image questions")
        if item is None:  # a prompt VLMEvalKit built: its text is the question as is, its images those files
            images = [Path(path).read_bytes() for path in paths]
            item = text_item(images[0], text, images[1:])
        bench = self.bench or dataset or "vlmeval"
        cap = self.max_new_tokens or self.model.max_new_tokens(bench)
        row = self.model.generate([item], bench, cap)[0]
        if row.status == "error":
            raise RuntimeError(f"sparsectx generation failed on item {item.index}: {row.error}")
        return row.output if self.return_output else (row.answer or "")
