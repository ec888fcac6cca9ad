"""The checkpoint folder checked without loading weights: family, processor files, chat template and its image
markers, thinking prefix, eos ids and the visual tokens of a sample image."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PIL import Image

from sparsectx.models.loading import ASSETS_DIR, PACKAGE_PREFIX
from sparsectx.preflight.report import Checked

PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")
"""Where a checkpoint declares its image processor (``processor.declared_image_processor``'s order)."""
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


def checkpoint_folder(path: str, revision: str | None = None) -> tuple[Path | None, str]:
    """Returns (the local folder of ``model.path``, "") or (None, why not): ``package:<dir>`` is a shipped
    checkpoint, a path is a folder, anything else a hub id found only in the HF cache at ``revision``
    (``model.revision``; None: the commit ``refs/main`` names), as ``loading.hub_snapshot`` reads it (no
    download here)."""
    if path.startswith(PACKAGE_PREFIX):
        return ASSETS_DIR / path[len(PACKAGE_PREFIX) :], ""
    local = Path(path).expanduser()
    if path.startswith(("/", ".", "~")) or local.exists():
        return local, ""
    from sparsectx.models.loading import hub_snapshot

    try:
        return Path(hub_snapshot(path, revision, local_files_only=True)), ""
    except FileNotFoundError as error:  # not cached at that revision, incomplete, or a malformed id
        at = f"at revision {revision}" if revision else "at refs/main (model.revision=null)"
        return None, f"a hub id, not in the local Hugging Face cache {at} ({type(error.__cause__).__name__})"


def check_checkpoint(name: str, model: Any, sample_size: Sequence[int] = (640, 480)) -> Checked:
    """Returns what the checkpoint folder of model preset ``name`` (``model``: a ``ModelConfig``) holds and
    every problem found, without loading weights.

    Checks run in order and stop at the first that leaves nothing to check further (no folder, no
    ``config.json``, a family not served, no tokenizer).
    """
    checked = Checked("checkpoint", name, model.path)
    folder, why = checkpoint_folder(model.path, model.revision)
    key = f"model.path={model.path}"
    if folder is None:
        pin = f" --revision {model.revision}" if model.revision else ""
        checked.add(
            model.path,
            f"{key} is {why}",
            f"download it into the cache (hf download {model.path}{pin}), or into a folder (hf download "
            f"{model.path}{pin} --local-dir /models/{Path(model.path).name}) and set "
            f"model.path=/models/{Path(model.path).name} (in the study: model_paths.{name}=<folder>)",
        )
        return checked
    checked.file = str(folder)
    if not folder.is_dir():
        checked.add(folder, f"{key}: no folder there", "point model.path at the checkpoint folder (config.json inside)")
        return checked
    spec = _family(checked, folder)
    if spec is None:
        return checked
    checked.facts.append(f"family {spec.name}")
    _processor_files(checked, folder, spec)
    tokenizer = _tokenizer(checked, folder)
    if tokenizer is None:
        return checked
    template = _template(checked, folder, tokenizer, spec, model.thinking, model.answer_prefix)
    _eos_ids(checked, folder, tokenizer)
    if template is not None and not checked.problems:
        _sample_tokens(checked, folder, model, spec, sample_size)
    return checked


def _family(checked: Checked, folder: Path) -> Any:
    """Returns the family record of ``folder``'s config.json, or None after recording why not."""
    from sparsectx.models.families import FAMILIES

    config = folder / "config.json"
    if not config.is_file():
        checked.add(
            config,
            "no config.json: this is not a checkpoint folder (or not all of one)",
            "set model.path to the folder that holds the checkpoint's config.json, tokenizer and processor files, "
            "or copy its config.json from the published checkpoint",
        )
        return None
    try:
        parsed = json.loads(config.read_text())
    except json.JSONDecodeError as error:
        checked.add(config, f"not JSON ({error})", "re-download config.json from the published checkpoint")
        return None
    try:
        return FAMILIES.for_config(parsed, str(config))
    except KeyError as error:
        column = "model_type" if "architectures" not in str(error.args[0]) else "architectures"
        accepted = ", ".join(FAMILIES.model_types())
        checked.add(
            config,
            str(error.args[0]).removeprefix(f"{config}: "),
            f"point model.path at a checkpoint whose model_type is one of {accepted} (a checkpoint of another "
            "family needs its adapter in sparsectx.models first)",
            column=column,
        )
        return None


def _processor_files(checked: Checked, folder: Path, spec: Any) -> None:
    """Records the image processor the folder declares, or the problem with its files."""
    from sparsectx.models.processor import declared_image_processor

    if not any((folder / name).is_file() for name in PROCESSOR_FILES):
        checked.add(
            folder,
            f"no {' or '.join(PROCESSOR_FILES)}: the image processor's settings are missing",
            "copy preprocessor_config.json (or processor_config.json) from the published checkpoint",
        )
        return
    declared, where = declared_image_processor(folder)
    try:
        cls = spec.image_processor_class(declared, where)
    except ValueError as error:
        checked.add(
            where,
            str(error).removeprefix(f"{where}: "),
            "use the checkpoint's own processor files",
            column="image_processor_type",
        )
        return
    checked.facts.append(f"image processor {cls.__name__} ({Path(where).name})")


def _tokenizer(checked: Checked, folder: Path) -> Any:
    """Returns the folder's tokenizer, or None after recording why it does not load."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(folder))
    except Exception as error:  # a missing or corrupt tokenizer file; transformers raises many kinds
        present = [name for name in TOKENIZER_FILES if (folder / name).is_file()]
        checked.add(
            folder,
            f"the tokenizer does not load ({type(error).__name__}: {str(error)[:160]}); files present: {present}",
            "copy tokenizer.json and tokenizer_config.json from the published checkpoint",
        )
        return None


def _template(
    checked: Checked, folder: Path, tokenizer: Any, spec: Any, thinking: bool | None, answer_prefix: str
) -> Any:
    """Returns the checkpoint's chat template after checking its markers, thinking switch and the answer prefix
    after its generation prompt (None after recording a problem)."""
    from sparsectx.models.templates import (
        check_image_markers,
        find_chat_template,
        generation_prefix,
        opens_thinking,
        template_thinking_default,
    )

    try:
        template = find_chat_template(folder, tokenizer)
    except FileNotFoundError:
        checked.add(
            folder,
            "no chat template: none in tokenizer_config.json's chat_template, chat_template.jinja or "
            "chat_template.json",
            "copy the checkpoint's chat_template.jinja (or chat_template.json) into the folder",
        )
        return None
    source = Path(template.source).name if template.source != "tokenizer" else "the tokenizer"
    column = "chat_template" if template.source.endswith(".json") else ""
    switches = {} if thinking is None or spec.thinking_switch is None else {spec.thinking_switch: thinking}
    if thinking is not None:
        if spec.thinking_switch is None:
            checked.add(
                template.source,
                f"model.thinking={thinking} but family {spec.name!r} has no thinking switch",
                "set model.thinking=null",
                column=column,
            )
            return None
        if template_thinking_default(tokenizer, template, spec.thinking_switch) is None:
            checked.add(
                template.source,
                f"model.thinking={thinking} but the template renders the same generation prompt "
                f"whatever {spec.thinking_switch} is",
                "use the checkpoint's own template, or model.thinking=null",
                column=column,
            )
            return None
    try:
        check_image_markers(tokenizer, template, spec.image_marker, switches)
    except ValueError:
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "x"}]}],
            chat_template=template.text,
            tokenize=False,
            add_generation_prompt=True,
            **switches,
        )
        checked.add(
            template.source,
            f"the chat template does not render one {spec.image_marker!r} per image part "
            f"({rendered.count(spec.image_marker)} for one image)",
            f"use the checkpoint's own template, which renders {spec.image_marker!r} for each image",
            column=column,
        )
        return None
    prefix = generation_prefix(tokenizer, template, switches, spec.thinking_tags)
    if answer_prefix.strip() and opens_thinking(prefix, spec.thinking_tags):
        checked.add(
            template.source,
            f"model.answer_prefix={answer_prefix!r} would be pre-filled inside the thinking block the generation "
            f"prompt opens ({prefix!r})",
            "set model.thinking=false (the template then closes an empty block before it) or model.answer_prefix=''",
            column=column,
        )
        return None
    answer = f", answer prefix {answer_prefix!r}" if answer_prefix else ""
    checked.facts.append(f"template {source}, one {spec.image_marker} per image, thinking prefix {prefix!r}{answer}")
    return template


def _eos_ids(checked: Checked, folder: Path, tokenizer: Any) -> None:
    """Records the eos ids of the tokenizer and ``generation_config.json``, or the problem with them."""
    ids: list[int] = [] if tokenizer.eos_token_id is None else [int(tokenizer.eos_token_id)]
    generation = folder / "generation_config.json"
    if generation.is_file():
        value = json.loads(generation.read_text()).get("eos_token_id")
        ids += [int(v) for v in (value if isinstance(value, list) else [value]) if v is not None]
    ids = sorted(set(ids))
    if not ids:
        checked.add(
            generation if generation.is_file() else folder / "tokenizer_config.json",
            "no eos token id in the tokenizer nor in generation_config.json: greedy decoding would never stop "
            "before its cap",
            "copy generation_config.json (its eos_token_id) from the published checkpoint",
            column="eos_token_id",
        )
        return
    outside = [i for i in ids if i >= len(tokenizer)]
    if outside:
        checked.add(
            generation,
            f"eos ids {outside} are outside the tokenizer's {len(tokenizer)} tokens",
            "use the generation_config.json of this checkpoint",
            column="eos_token_id",
        )
        return
    names = [tokenizer.convert_ids_to_tokens(i) for i in ids]
    checked.facts.append(f"eos ids {ids} ({', '.join(names)})")


def _sample_tokens(checked: Checked, folder: Path, model: Any, spec: Any, size: Sequence[int]) -> None:
    """Records the visual-token count of a ``size`` image under the checkpoint's processor and token cap."""
    from sparsectx.models.processor import load_processor

    try:
        processor = load_processor(folder, 1, model.max_visual_tokens, model.thinking)
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "x"}]}]
        text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        out = processor([text], [Image.new("RGB", tuple(size), (128, 128, 128))])
    except Exception as error:  # the processor's own refusal names the file; pass it on whole
        checked.add(
            folder,
            f"the processor does not prepare a {size[0]}x{size[1]} image ({error})",
            "use the checkpoint's own processor files",
        )
        return
    marker = processor.tokenizer.convert_tokens_to_ids(spec.image_marker)
    tokens = int((out["input_ids"] == marker).sum())
    cap = "the checkpoint's own pixel bound" if model.max_visual_tokens is None else f"cap {model.max_visual_tokens}"
    checked.facts.append(f"{size[0]}x{size[1]} image -> {tokens} visual tokens ({cap})")
