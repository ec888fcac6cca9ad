"""The chat template a checkpoint ships, its image markers and its thinking switch, found by rendering it.

Where a template lives, in the order transformers 5.17 itself reads them: the tokenizer's (``tokenizer_config.json``
``chat_template``, or ``chat_template.jinja`` beside it, which ``PreTrainedTokenizerBase.from_pretrained``
loads into ``tokenizer.chat_template``), else the processor's (``chat_template.json`` ``chat_template``, or a
``chat_template.jinja`` that only the processor reads; ``ProcessorMixin.from_pretrained``,
``transformers/processing_utils.py``). ``find_chat_template`` returns the template with the file it came from;
``check_image_markers`` renders one and two images and requires one marker per image; ``generation_prefix``
renders a generation prompt and returns what it opens after the assistant header (``"<think>\\n"`` when the
template pre-opens a thinking block), so a caller appending a reference trace never doubles ``<think>``.
``ChatTemplating`` renders the model's prompts with the thinking switch and the answer prefix (``model.answer_prefix``,
text pre-filled after the generation prompt), and reads a generated continuation back as the response it ends.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from transformers import BatchEncoding, PreTrainedTokenizerBase

if TYPE_CHECKING:
    from sparsectx.models.family import FamilySpec

TEMPLATE_FILES = ("tokenizer_config.json", "chat_template.jinja", "chat_template.json")
"""The files a template may come from, in the order they are read."""
PROBE_TEXT = "Describe the picture."
"""The user text of the probe conversations (any text without template syntax works)."""


@dataclass(frozen=True)
class ChatTemplate:
    """A checkpoint's chat template and where it was found."""

    text: str
    """The Jinja source."""
    source: str
    """``<folder>/<file>`` it was read from (``tokenizer`` for one set in code, not in a file)."""


def _pick(value: object) -> str | None:
    """Returns the default template of a ``chat_template`` value (a string, or a list of named templates)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        named = {entry.get("name"): entry.get("template") for entry in value if isinstance(entry, dict)}
        return named.get("default")
    if isinstance(value, dict):
        return value.get("default")
    return None


def find_chat_template(folder: str | Path | None, tokenizer: PreTrainedTokenizerBase) -> ChatTemplate:
    """Returns the chat template the checkpoint at ``folder`` ships: the tokenizer's, else the processor's.

    Raises:
        FileNotFoundError: none of ``TEMPLATE_FILES`` holds a template (naming the folder and the files).
    """
    local = Path(folder) if folder is not None else None
    if local is not None and local.is_dir():
        config = local / "tokenizer_config.json"
        if config.is_file():
            found = _pick(json.loads(config.read_text()).get("chat_template"))
            if found:
                return ChatTemplate(found, str(config))
        jinja = local / "chat_template.jinja"
        if jinja.is_file():
            return ChatTemplate(jinja.read_text(), str(jinja))
        processor = local / "chat_template.json"
        if processor.is_file():
            found = _pick(json.loads(processor.read_text()).get("chat_template"))
            if found:
                return ChatTemplate(found, str(processor))
    found = _pick(tokenizer.chat_template)
    if found:
        return ChatTemplate(found, "tokenizer")
    raise FileNotFoundError(
        f"no chat template in {folder}: looked for tokenizer_config.json's chat_template, chat_template.jinja "
        "and chat_template.json's chat_template; copy the checkpoint's template file into the folder"
    )


def probe_messages(images: int, answer: str | None = None) -> list[dict]:
    """Returns a user turn with ``images`` image parts and the probe text (and an assistant turn if given)."""
    content = [{"type": "image"} for _ in range(images)] + [{"type": "text", "text": PROBE_TEXT}]
    messages = [{"role": "user", "content": content}]
    if answer is not None:
        messages.append({"role": "assistant", "content": [{"type": "text", "text": answer}]})
    return messages


def render(
    tokenizer: PreTrainedTokenizerBase,
    template: ChatTemplate,
    messages: list[dict],
    add_generation_prompt: bool,
    switches: dict[str, bool] | None = None,
) -> str:
    """Returns ``messages`` rendered by ``template`` (text, not ids), with the template variables ``switches``."""
    return tokenizer.apply_chat_template(
        messages,
        chat_template=template.text,
        tokenize=False,
        add_generation_prompt=add_generation_prompt,
        **(switches or {}),
    )


def check_image_markers(
    tokenizer: PreTrainedTokenizerBase, template: ChatTemplate, marker: str, switches: dict[str, bool] | None = None
) -> None:
    """Returns None if ``template`` renders one ``marker`` per image part (checked with 1 and 2 images).

    Raises:
        ValueError: the count differs, naming the template's file, the marker and what was rendered.
    """
    for images in (1, 2):
        text = render(tokenizer, template, probe_messages(images), True, switches)
        if text.count(marker) != images:
            raise ValueError(
                f"the chat template from {template.source} renders {text.count(marker)} {marker!r} markers for "
                f"{images} image part(s), not one per image; rendered: {text!r}. Use the checkpoint's own "
                "template (tokenizer_config.json, chat_template.jinja or chat_template.json)"
            )


def generation_suffix(
    tokenizer: PreTrainedTokenizerBase, template: ChatTemplate, switches: dict[str, bool] | None = None
) -> str:
    """Returns what ``add_generation_prompt=True`` appends to a rendered conversation (assistant header and
    anything the template opens after it).

    Raises:
        ValueError: the generation prompt is not an append to the conversation (naming the template's file).
    """
    messages = probe_messages(1)
    plain = render(tokenizer, template, messages, False, switches)
    prompted = render(tokenizer, template, messages, True, switches)
    if not prompted.startswith(plain):
        raise ValueError(
            f"the chat template from {template.source} changes the conversation when asked for a generation "
            f"prompt (without: {plain!r}, with: {prompted!r}); the thinking prefix cannot be read from it"
        )
    return prompted[len(plain) :]


def generation_prefix(
    tokenizer: PreTrainedTokenizerBase,
    template: ChatTemplate,
    switches: dict[str, bool] | None = None,
    thinking_tags: tuple[str, str] = ("<think>", "</think>"),
) -> str:
    """Returns what the rendered generation prompt holds after the assistant header: from the first thinking
    tag to its end (``"<think>\\n"`` when the template pre-opens a block, ``"<think>\\n\\n</think>\\n\\n"``
    when it closes an empty one), or ``""`` when it opens nothing."""
    suffix = generation_suffix(tokenizer, template, switches)
    start = suffix.find(thinking_tags[0])
    return "" if start < 0 else suffix[start:]


def opens_thinking(prefix: str, thinking_tags: tuple[str, str] = ("<think>", "</think>")) -> bool:
    """Returns True if ``prefix`` (a ``generation_prefix``) leaves a thinking block open."""
    opened = prefix.rfind(thinking_tags[0])
    return opened >= 0 and prefix.find(thinking_tags[1], opened) < 0


def template_thinking_default(tokenizer: PreTrainedTokenizerBase, template: ChatTemplate, switch: str) -> bool | None:
    """Returns the value of ``switch`` the template behaves as when it is not passed (True/False), or None
    when the template renders the same either way (it has no such switch)."""
    default = generation_suffix(tokenizer, template)
    on = generation_suffix(tokenizer, template, {switch: True})
    off = generation_suffix(tokenizer, template, {switch: False})
    if on == off:
        return None
    if default == on:
        return True
    return False if default == off else None


class ChatTemplating:
    """Prompt rendering shared by the processors: the checkpoint's template, the family's thinking switch and
    the answer prefix.

    A processor sets ``tokenizer``, ``chat_template`` (``find_chat_template``), ``thinking_switch`` and
    ``thinking_tags`` (from its ``FamilySpec``), ``thinking_setting`` (``model.thinking``: None = the
    template's own default) and ``answer_prefix`` (``model.answer_prefix``).
    """

    tokenizer: PreTrainedTokenizerBase
    chat_template: ChatTemplate | None = None
    thinking_switch: str | None = None
    thinking_tags: tuple[str, str] = ("<think>", "</think>")
    thinking_setting: bool | None = None
    answer_prefix: str = ""
    """Text pre-filled after the generation prompt (``model.answer_prefix``, e.g. LT-OPD's ``<answer>``): every
    prompt ends with it, generation continues from it, and ``response`` puts it back in front of the generated
    text; "" = none."""
    spec: FamilySpec | None = None
    """The checkpoint's family record (set by ``load_processor``)."""

    def template_switches(self) -> dict[str, bool]:
        """Returns the template variables passed on every render (the thinking switch when set)."""
        if self.thinking_setting is None or self.thinking_switch is None:
            return {}
        return {self.thinking_switch: self.thinking_setting}

    def _template(self) -> ChatTemplate:
        """Returns the template prompts are rendered with: the tokenizer's current one (``load_processor`` sets
        the processor's onto a tokenizer that has none), with the file it was loaded from."""
        current = _pick(self.tokenizer.chat_template)
        if current is None:
            self.chat_template = find_chat_template(None, self.tokenizer)
        elif self.chat_template is None or self.chat_template.text != current:
            self.chat_template = ChatTemplate(current, "tokenizer.chat_template (set in code)")
        return self.chat_template

    def apply_chat_template(
        self, messages: list[dict], tokenize: bool, add_generation_prompt: bool
    ) -> str | BatchEncoding:
        """Returns the prompt of ``messages`` under the checkpoint's chat template (one image marker per image),
        with the family's thinking switch as ``model.thinking`` sets it and, after a generation prompt, the
        ``answer_prefix``; ``tokenize=True`` returns its ids as the tokenizer's own template call does (the text
        tokenized without special tokens added)."""
        text = render(self.tokenizer, self._template(), messages, add_generation_prompt, self.template_switches())
        if add_generation_prompt:
            text += self.answer_prefix
        return self.tokenizer(text, add_special_tokens=False) if tokenize else text

    @property
    def generation_prefix(self) -> str:
        """What the generation prompt holds after the assistant header (``templates.generation_prefix``); the
        ``answer_prefix`` follows it."""
        return generation_prefix(self.tokenizer, self._template(), self.template_switches(), self.thinking_tags)

    @property
    def prefilled(self) -> str:
        """Everything a prompt holds after the assistant header before the first generated token: the
        ``generation_prefix`` then the ``answer_prefix`` (what a reference response must not repeat)."""
        return self.generation_prefix + self.answer_prefix

    def response(self, generated: str) -> str:
        """Returns the response that ``generated`` (the decoded continuation of a prompt) ends: the
        ``answer_prefix`` then ``generated``, the text answers are extracted and scored from."""
        return self.answer_prefix + generated

    @property
    def thinking(self) -> bool | None:
        """The effective thinking setting: ``model.thinking`` when set, else the template's default for the
        family's switch; None when the family's template has no thinking switch."""
        if self.thinking_switch is None:
            return None
        if self.thinking_setting is not None:
            return self.thinking_setting
        return template_thinking_default(self.tokenizer, self._template(), self.thinking_switch)
