"""The prompt protocol shared by training and evaluation: question text and chat messages.

User turn = the image, then the question (with its options for multiple choice), then the instruction
from ``conf/data/*.yaml`` (``prompt.instruction``), joined by newlines. The system turn is ``prompt.system``.
"""

from __future__ import annotations

from typing import Any


def format_question(question: str, options: dict[str, str], mcq_hint: str) -> str:
    """Returns the question as the model sees it: for multiple choice, ``L. text`` lines and the hint follow.

    Args:
        question: the question without options.
        options: option letter -> text; empty for an open question (then ``question`` is returned as is).
        mcq_hint: the line after the options (``prompt.mcq_hint``).
    """
    if not options:
        return question
    return "\n".join([question, *(f"{letter}. {text}" for letter, text in options.items()), mcq_hint])


def build_messages(question_text: str, system: str, instruction: str, image: Any) -> list[dict[str, Any]]:
    """Returns the chat messages [system, user] for one image and one question.

    Args:
        question_text: output of ``format_question``.
        system: the system message (``prompt.system``).
        instruction: appended after the question on its own line (``prompt.instruction``).
        image: a PIL image for ``processor.apply_chat_template(..., tokenize=True)``, or None when only the
            text is rendered.
    """
    image_part: dict[str, Any] = {"type": "image"} if image is None else {"type": "image", "image": image}
    return [
        {"role": "system", "content": [{"type": "text", "text": system}]},
        {
            "role": "user",
            "content": [image_part, {"type": "text", "text": f"{question_text}\n{instruction}"}],
        },
    ]
