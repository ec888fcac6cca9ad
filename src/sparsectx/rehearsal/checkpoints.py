"""Tiny random-weight instances of the real checkpoints, written from their published files.

A rehearsal runs every job of a real preset with each model replaced by the folder ``write_tiny_checkpoint``
writes for it: the published ``config.json`` in its own layout, shrunk by the family's ``tiny_config`` (same
``model_type`` and ``architectures``, the published geometry and layer pattern in miniature); the published
``preprocessor_config.json`` as it is; the published ``tokenizer_config.json`` (its chat template) over a
character-level stand-in tokenizer that carries the published special tokens; random float32 weights of the
published architecture's HF class. Token ids in ``config.json`` are moved to the stand-in's ids of the same
token strings (``FamilySpec.special_tokens``). The folder loads through ``sparsectx.models.loading`` and passes
the preflight's checkpoint check as the real one would; its tokens are meaningless, its code paths are real.
"""

from __future__ import annotations

import json
import shutil
import string
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoConfig, PreTrainedTokenizerFast

from sparsectx.models.families import FAMILIES
from sparsectx.models.family import FamilySpec
from sparsectx.models.published import model_hub_id, published_folder

PUBLISHED_FILES = ("config.json", "preprocessor_config.json", "tokenizer_config.json")
"""The files a published checkpoint's folder must keep for a tiny instance to be written from it."""
STAND_IN_KEYS = ("tokenizer_class", "added_tokens_decoder", "unk_token")
"""The stand-in tokenizer's own ``tokenizer_config.json`` entries, laid over the published file's."""
DECLARED_TOKENS = ("bos_token", "eos_token", "pad_token", "unk_token")
"""``tokenizer_config.json`` entries that name a special token the stand-in must carry."""
TOKEN_ID_SUFFIXES = ("_token_id", "_token_index")
"""``config.json`` keys (top level and ``text_config``) whose values are token ids."""
UNKNOWN = "<unk>"


def published_files(folder: Path) -> Path:
    """Returns ``folder`` once it holds every file of ``PUBLISHED_FILES``.

    Raises:
        FileNotFoundError: a file is missing; names the folder and the missing files.
    """
    missing = [name for name in PUBLISHED_FILES if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{folder} lacks {', '.join(missing)}: a tiny instance is written from the published config.json, "
            "preprocessor_config.json and tokenizer_config.json; add the missing ones (sources in SOURCES.md)"
        )
    return folder


def char_tokenizer(specials: list[str], eos: str, pad: str | None) -> PreTrainedTokenizerFast:
    """Returns a character-level tokenizer: ``specials`` (ids 0, 1, ...), then ``<unk>`` and each printable
    ASCII character as one token. Prompts keep their template's shape in a vocabulary of about 100 + specials."""
    vocab = {tok: i for i, tok in enumerate([*specials, UNKNOWN, *string.printable])}
    core = Tokenizer(models.WordLevel(vocab, unk_token=UNKNOWN))
    core.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    core.add_special_tokens(specials)
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=core, eos_token=eos, pad_token=pad, unk_token=UNKNOWN)


def _token_string(value: Any) -> str | None:
    """Returns the token a ``tokenizer_config.json`` entry names (a string, or an AddedToken's ``content``)."""
    return value.get("content") if isinstance(value, Mapping) else value


def stand_in_specials(spec: FamilySpec, published: Mapping[str, Any]) -> list[str]:
    """Returns the special tokens the stand-in carries: the family's (``spec.special_tokens``) in published id
    order, then any other the published ``tokenizer_config.json`` declares (bos/eos/pad, added tokens)."""
    declared = [_token_string(published.get(key)) for key in DECLARED_TOKENS]
    declared += [_token_string(entry) for entry in published.get("added_tokens_decoder", {}).values()]
    specials = [spec.special_tokens[i] for i in sorted(spec.special_tokens)]
    return specials + [t for t in dict.fromkeys(declared) if t and t not in specials and t != UNKNOWN]


def write_processor_files(published: Path, out: Path) -> PreTrainedTokenizerFast:
    """Returns the stand-in tokenizer after writing the processor files of published checkpoint folder
    ``published`` into ``out``: ``preprocessor_config.json`` as published, the stand-in's ``tokenizer.json``, and
    the published ``tokenizer_config.json`` (its chat template verbatim) with the stand-in's class and special
    tokens laid over it so transformers loads it. The real ``tokenizer.json`` is megabytes; prompts here only
    need the template's tokens."""
    published_files(published)
    spec = FAMILIES.for_config(json.loads((published / "config.json").read_text()), str(published / "config.json"))
    declared = json.loads((published / "tokenizer_config.json").read_text())
    eos, pad = _token_string(declared.get("eos_token")), _token_string(declared.get("pad_token"))
    tokenizer = char_tokenizer(stand_in_specials(spec, declared), eos, pad)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out)
    saved = json.loads((out / "tokenizer_config.json").read_text())
    stand_in = {key: saved[key] for key in STAND_IN_KEYS if key in saved}
    (out / "tokenizer_config.json").write_text(json.dumps({**declared, **stand_in}, indent=2))
    (out / "chat_template.jinja").unlink(missing_ok=True)
    shutil.copy(published / "preprocessor_config.json", out / "preprocessor_config.json")
    return tokenizer


def remap_token_ids(config: dict[str, Any], spec: FamilySpec, tokenizer: PreTrainedTokenizerFast, where: str) -> None:
    """Returns None after replacing every token id of ``config`` (top level and ``text_config``) by the stand-in
    tokenizer's id of the same token string (``spec.special_tokens`` names the published id's string).

    Raises:
        ValueError: a published id is not one of the family's special tokens (naming ``where`` and the key).
    """

    def moved(key: str, published_id: int) -> int:
        if published_id not in spec.special_tokens:
            raise ValueError(
                f"{where}: {key}={published_id} is not a special token of family {spec.name!r} (known ids "
                f"{sorted(spec.special_tokens)}); add its string to SPECIAL_TOKENS in sparsectx/models/{spec.name}.py"
            )
        return tokenizer.convert_tokens_to_ids(spec.special_tokens[published_id])

    for section in (config, config.get("text_config", {})):
        for key, value in section.items():
            if key.endswith(TOKEN_ID_SUFFIXES) and value is not None:
                section[key] = [moved(key, v) for v in value] if isinstance(value, list) else moved(key, value)


def tiny_config(published: dict[str, Any], tokenizer: PreTrainedTokenizerFast, where: str) -> dict[str, Any]:
    """Returns the tiny ``config.json`` of published config ``published``: the family's ``tiny_config``, the
    stand-in's vocabulary size, and token ids moved to the stand-in's ids of the same strings."""
    spec = FAMILIES.for_config(published, where)
    config = spec.tiny_config(published)
    config.get("text_config", config)["vocab_size"] = len(tokenizer)
    if "vocab_size" in config:
        config["vocab_size"] = len(tokenizer)
    remap_token_ids(config, spec, tokenizer, where)
    return config


def write_tiny_checkpoint(model: str, out: Path, seed: int = 0) -> Path:
    """Returns ``out`` holding a tiny random-weight instance of model preset ``model``'s checkpoint (``conf/model``
    name, e.g. ``qwen2_5_vl_7b``), written from its published files (``sparsectx.models.published``).

    The weights are the published architecture's HF class built from the tiny config under
    ``torch.manual_seed(seed)`` (the same seed gives the same bytes), float32, saved as safetensors; its
    ``generation_config.json`` is the one transformers derives from that config (eos ids remapped with it).

    Raises:
        FileNotFoundError: the preset or its published files are missing (naming what to add).
    """
    published = published_files(published_folder(model_hub_id(model)))
    tokenizer = write_processor_files(published, out)
    config = tiny_config(json.loads((published / "config.json").read_text()), tokenizer, str(published))
    (out / "config.json").write_text(json.dumps(config, indent=2))
    torch.manual_seed(seed)
    weights = getattr(transformers, config["architectures"][0])(AutoConfig.from_pretrained(out))
    weights.to(torch.float32).save_pretrained(out)
    (out / "config.json").write_text(json.dumps(config, indent=2))  # the published layout, not the class's dump
    return out
