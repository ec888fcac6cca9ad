"""The model behind the harness adapters: a sparsectx checkpoint + pruner + budget that answers harness rows
exactly as ``src/evaluate.py`` answers benchmark items (same config, prompt, pruner seeds, decoding).

The VLMEvalKit and lmms-eval adapters (``sparsectx.integrations``) turn their harness's rows into
``sparsectx.data.Item`` and call ``HarnessModel.generate``; nothing here imports a harness, so this part is
tested in the project's own environment. The config is ``conf/evaluate.yaml`` composed with the same
overrides ``evaluate.py`` takes (``model=``, ``checkpoint=``, ``pruner=``, ``budget=``, ``seed=``, ...);
the conf directory is the checkout's, so the adapters need sparsectx installed from a checkout
(``pip install -e .``, as ``make vlmeval-env`` does).
"""

from __future__ import annotations

import base64
import copy
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from sparsectx.config_schema import load_config
from sparsectx.data import Item, format_question
from sparsectx.data.layout import BenchLayout, PromptParts
from sparsectx.eval.checkpoints import load_eval_model
from sparsectx.eval.config import CONF_DIR, BenchSpec, EvalConfig, load_eval_config
from sparsectx.eval.protocol import GenerationRow, generate_rows
from sparsectx.eval.slots_budget import resolve_for_device, use_slots
from sparsectx.models import LoadedModel

OPTION_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
DEFAULT_MAX_NEW_TOKENS = 1024
"""SCOPD's reasoning cap (App. A), every real benchmark config's ``max_new_tokens``."""


def compose_eval_config(overrides: Sequence[str]) -> EvalConfig:
    """Returns ``conf/evaluate.yaml`` composed with ``overrides`` (tracking off), checked as ``evaluate.py``
    checks it, its ``auto`` batch and queue resolved as ``evaluate.py`` resolves them (``slots_budget``) for its
    benchmarks at a cap of at least ``DEFAULT_MAX_NEW_TOKENS`` (another dataset's rows are generated at that).

    Raises:
        FileNotFoundError: no ``conf/`` beside the package (sparsectx installed from a wheel, not a checkout).
    """
    if not (CONF_DIR / "evaluate.yaml").is_file():
        raise FileNotFoundError(
            f"no conf/evaluate.yaml at {CONF_DIR}: the harness adapters compose the checkout's config; "
            "install sparsectx from its checkout (pip install -e <checkout>, as `make vlmeval-env` does)"
        )
    with initialize_config_dir(version_base=None, config_dir=str(CONF_DIR)):
        cfg = compose("evaluate", overrides=["logger=none", *overrides])
    checked = load_eval_config(cfg)
    sized = copy.deepcopy(checked)  # a harness row may be generated at up to DEFAULT_MAX_NEW_TOKENS, whatever bench=
    for spec in sized.bench.values():
        spec.max_new_tokens = max(spec.max_new_tokens, DEFAULT_MAX_NEW_TOKENS)
    use_slots(checked, resolve_for_device(sized))
    return checked


def _missing(value: Any) -> bool:
    """Returns whether a harness cell is empty (None, NaN, "" or "nan", as pandas leaves absent options)."""
    return value is None or value != value or str(value).strip() in ("", "nan")


def item_from_row(row: Mapping[str, Any], image_bytes: bytes) -> Item:
    """Returns the project's ``Item`` of one harness row (``index``, ``question``, option columns A..Z,
    ``answer``, ``category``); ``image_bytes`` is the image as the benchmark file stores it."""
    options = {k: str(row[k]) for k in OPTION_LETTERS if k in row and not _missing(row[k])}
    index = row.get("index", "")
    return Item(
        index=int(index) if str(index).lstrip("-").isdigit() else index,
        image_bytes=image_bytes,
        question=str(row["question"]),
        options=options,
        answer="" if _missing(row.get("answer")) else str(row["answer"]),
        category="" if _missing(row.get("category")) else str(row["category"]),
        family="",
        subset="",
        trace="",
        scene="",
        extra={},
    )


def formatted(item: Item, mcq_hint: str) -> Item:
    """Returns ``item`` with its question already as the model sees it (options and hint folded in), the form
    a harness message carries; ``evaluate.py``'s prompt of ``item`` and of ``formatted(item)`` are equal."""
    return replace(item, question=format_question(item.question, item.options, mcq_hint), options={})


def harness_layout() -> BenchLayout:
    """Returns the layout harness rows are asked under: the rows as the adapter made them (options in option
    columns, the answer as written) in the project's question format (``conf/bench_prompt/project.yaml``,
    ``format_question``'s), so a harness prompt equals ``evaluate.py``'s on the synthetic benchmarks."""
    parts_file = CONF_DIR / "bench_prompt" / "project.yaml"
    parts = load_config(PromptParts, OmegaConf.load(parts_file), str(parts_file))
    return BenchLayout(
        files=["harness rows"],
        drop_rows=[],
        options="columns",
        options_column="",
        answer="as_is",
        gold_column="answer",
        prompt=parts,
        source="the harness adapter's rows",
    )


def image_bytes_of(cell: str | Sequence[str]) -> bytes:
    """Returns the encoded bytes of a TSV ``image`` cell (base64; the first image of a multi-image row)."""
    return images_of(cell)[0]


def images_of(cell: str | Sequence[str]) -> list[bytes]:
    """Returns the encoded bytes of every image of a TSV ``image`` cell in order: one for a base64 string, each
    of a multi-image row's list (VLMEvalKit's ``ImageBaseDataset`` keeps such a cell as a list of base64 strings,
    vlmeval/dataset/image_base.py ``__init__``)."""
    return [base64.b64decode(data) for data in ([cell] if isinstance(cell, str) else cell)]


def text_item(image_bytes: bytes, text: str, more_images: Sequence[bytes] = ()) -> Item:
    """Returns an ``Item`` for a prompt the adapter did not build (its text is the question as is), asked about
    ``image_bytes`` and then ``more_images`` (a multi-image question: every image reaches the model, in order);
    its id is a hash of the images and the text, so a random pruner's mask is stable across runs."""
    digest = hashlib.sha256(b"".join((image_bytes, *more_images)) + text.encode()).hexdigest()[:12]
    return Item(int(digest, 16), image_bytes, text, {}, "", "", "", "", "", "", {}, more_images=tuple(more_images))


@dataclass
class HarnessModel:
    """A loaded sparsectx model with the evaluation config it answers under."""

    cfg: EvalConfig
    loaded: LoadedModel
    info: dict[str, Any]

    @classmethod
    def from_overrides(cls, overrides: Sequence[str]) -> HarnessModel:
        """Returns the model of ``evaluate.py <overrides>``, loaded (a checkpoint's weights verified)."""
        cfg = compose_eval_config(overrides)
        loaded, info = load_eval_model(cfg.model, cfg.checkpoint, cfg.seed)
        return cls(cfg, loaded, info)

    def max_new_tokens(self, bench: str, default: int = DEFAULT_MAX_NEW_TOKENS) -> int:
        """Returns the generation cap of ``bench`` in the composed config (``default`` for another dataset).

        The cap must be ``evaluate.py``'s for equal answers: it sizes the decode engine's static KV cache,
        and greedy text on the tiny model changes with it (measured: 5 of 6 items at 128 vs 1024 tokens).
        """
        spec = self.cfg.bench.get(bench)
        return default if spec is None else spec.max_new_tokens

    def generate(self, items: list[Item], bench: str, max_new_tokens: int) -> list[GenerationRow]:
        """Returns one ``GenerationRow`` per item (raw ``output`` and extracted ``answer``), generated as
        ``evaluate.py`` generates benchmark ``bench`` (its name seeds the pruner masks with the item index)."""
        scorer = "mcq_vlmeval" if any(item.options for item in items) else "exact_match_vlmeval"
        spec = BenchSpec(bench, bench, None, scorer, max_new_tokens, harness_layout(), "none", "none")
        cfg = self.cfg
        return generate_rows(
            self.loaded,
            items,
            spec,
            cfg.prompt,
            cfg.pruner,
            cfg.budget,
            cfg.seed,
            cfg.decoding.sampling(max_new_tokens),
            cfg.engine,
            cfg.batch_size,
        )
