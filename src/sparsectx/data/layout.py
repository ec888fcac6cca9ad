"""How one benchmark's file is read and asked, as data (``bench.<name>.layout``), not as code branches.

A VLMEvalKit benchmark file differs from the next in where it keeps its options (A-Z cells, a Python list
cell such as ``candidates``, lines of a text cell such as MME-RealWorld's ``multi-choice options``), what its
gold cell holds (a letter, ``"A. text"``, the option's text, a list of accepted answers), which rows
VLMEvalKit drops before asking anything (``ImageBaseDataset.__init__``'s ``skip_noimg``), how many files make
the benchmark, and how its dataset class's ``build_prompt`` turns a row into text. ``BenchLayout`` states all
of that per benchmark in ``conf/bench/<name>.yaml`` (the prompt parts shared by a dataset class live in
``conf/bench_prompt/``), and this module applies it:

- ``apply_layout`` gives every item its options and its gold answer in the scorer's form; a row whose gold
  cannot be mapped is a ``Skip`` naming the row, the column and the value.
- ``render_question`` builds the text VLMEvalKit's ``build_prompt`` builds for the row (tests compare the
  two on fixtures in each benchmark's real layout, running VLMEvalKit itself).

Placeholders in prompt parts are ``{field}``: ``question``, ``options`` (the rendered options block),
``mcq_hint`` (the evaluation prompt's hint line), or any column of the row by its name (``{hint}``,
``{multi-choice options}``); ``{<column>:lines}`` is a Python-list cell written one item per line, as
VLMEvalKit's video classes write ``'\n'.join(eval(line['candidates']))`` (Video-MME, TempCompass). A part
naming a field that is empty (or ``nan``, as pandas writes a missing cell) is left out, as VLMEvalKit leaves
out ``Hint:`` when the ``hint`` cell is missing. Substitution is a single pass: text inserted for a field is
never read again as a template.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field, replace

from sparsectx.checks import check_choice
from sparsectx.data.tsv import Item, Skip, literal_cell

ANSWER_FORMS = ("as_is", "list", "letter")
DROP_RULES = ("no_image",)
OPTION_SOURCES = ("columns", "list", "lines", "none")
NA_STRINGS = frozenset(
    [
        "",
        "#N/A",
        "#N/A N/A",
        "#NA",
        "-1.#IND",
        "-1.#QNAN",
        "-NaN",
        "-nan",
        "1.#IND",
        "1.#QNAN",
        "<NA>",
        "N/A",
        "NA",
        "NULL",
        "NaN",
        "None",
        "n/a",
        "nan",
        "null",
    ]
)
"""Cells ``pandas.read_csv`` reads as missing by default (``pandas._libs.parsers.STR_NA_VALUES``, pandas 2.x):
VLMEvalKit loads every TSV that way (``vlmeval.smp.load``), so an option cell ``None`` or a hint ``N/A`` is
absent from the prompt it builds, and from the project's."""
_FIELD = re.compile(r"\{([^{}]+)\}")
_LETTERED = re.compile(r"^\s*(?:\(([A-Z])\)|([A-Z])[.:)])\s*(.*)$", re.DOTALL)
"""An option or gold cell that starts with its letter: ``(A) text``, ``A. text``, ``A: text``, ``A) text``."""


@dataclass
class PromptParts:
    """The text VLMEvalKit's ``build_prompt`` builds from one row, as parts (``bench.<name>.layout.prompt``)."""

    parts: list[str]
    """Concatenated in order; a part naming an empty field is left out (``"Hint: {hint}\\n"``)."""
    option: str
    """One option, fields ``{letter}`` and ``{text}`` (``"{letter}. {text}\\n"``)."""
    options_joiner: str
    """Between two options (``""`` when ``option`` ends its own line)."""
    options_header: str
    """Before the first option (``"Options:\\n"``); may name fields (``{mcq_hint}``)."""
    options_footer: str
    """After the last option (``"Please select the correct answer from the options above. \\n"``)."""
    source: str
    """The VLMEvalKit file and function (or the project file) these parts restate."""
    remove: list[str] = field(default_factory=list)
    """Literal strings dropped from the rendered text, wherever they occur: MUIRBench's ``<image>`` tags,
    which VLMEvalKit's ``MUIRDataset.split_MUIR`` turns into image positions and removes from the text (the
    project puts every image before the text). Empty for every other benchmark."""


@dataclass
class BenchLayout:
    """How a benchmark's file(s) are read, which rows are dropped, and how a row is asked and scored."""

    files: list[str]
    """VLMEvalKit's file name(s) of the benchmark (``$LMUData/<file>``); several are read one by one and
    concatenated as VLMEvalKit's ``ConcatDataset`` does (new ``index`` = position; ``original_index`` and
    ``SUB_DATASET`` kept as columns)."""
    drop_rows: list[str]
    """Rows VLMEvalKit drops before asking anything, counted in the result (never a refusing skip):
    ``no_image`` = an empty ``image`` cell (``ImageBaseDataset.__init__``, ``skip_noimg=True``)."""
    options: str
    """Where a row's options are: ``columns`` (non-empty single-letter columns ``A``...``Z``), ``list`` (a
    Python list in ``options_column``, lettered A, B, ... with a leading ``"A. "`` or ``"(A) "`` dropped),
    ``lines`` (one option per line of ``options_column``, each starting with its letter) or ``none``. An
    empty ``options_column`` cell is an open question (MathVista's free-form rows beside its multiple-choice
    ones); a scorer that needs options on every row refuses it when the file is read."""
    options_column: str
    """The column ``list`` and ``lines`` read (``candidates``, ``multi-choice options``); "" otherwise."""
    answer: str
    """What the gold cell (``gold_column``) holds: ``as_is`` (the reference as written), ``list`` (a Python
    list of accepted answers, the first the reference: TextVQA, OCRBench) or ``letter`` (an option letter,
    ``"A. text"``/``"(A)"``, or an option's text; mapped to its letter; a row without options keeps its
    answer as written, as MMMU's open questions)."""
    gold_column: str
    """The column holding the gold answer (``answer`` in VLMEvalKit's files); ``a|b`` takes the first non-empty
    of columns ``a`` and ``b`` (MathVista: ``answer_option``, the letter VLMEvalKit's ``post_check`` compares
    on a multiple-choice row, else ``answer``)."""
    prompt: PromptParts
    source: str
    """The VLMEvalKit dataset class (file) this layout was checked against, or the project's own file."""

    def __post_init__(self) -> None:
        if not self.files:
            raise ValueError("bench.*.layout.files is empty: name VLMEvalKit's file(s), e.g. [MMStar.tsv]")
        for rule in self.drop_rows:
            check_choice(rule, DROP_RULES, "bench.*.layout.drop_rows")
        check_choice(self.options, OPTION_SOURCES, "bench.*.layout.options")
        check_choice(self.answer, ANSWER_FORMS, "bench.*.layout.answer")
        if (self.options in ("list", "lines")) != bool(self.options_column):
            raise ValueError(
                f"bench.*.layout.options={self.options} with options_column={self.options_column!r}: list and "
                "lines read options_column (e.g. candidates); columns and none take options_column: ''"
            )


def apply_layout(items: list[Item], layout: BenchLayout) -> tuple[list[Item], list[Skip]]:
    """Returns the items with options and gold answers as ``layout`` says, and a ``Skip`` per row it cannot map.

    A skipped row names its index, the column and the value, with what the layout expected.
    """
    out, skips = [], []
    for item in items:
        options, problem = _options(item, layout)
        if problem:
            skips.append(Skip(str(item.index), problem))
            continue
        gold = gold_cell(item, layout.gold_column)
        answer, problem = _gold(gold, options, layout)
        if problem:
            skips.append(Skip(str(item.index), f"column {layout.gold_column!r}: {problem}"))
            continue
        out.append(replace(item, options=options, answer=answer))
    return out, skips


def gold_cell(item: Item, gold_column: str) -> str:
    """Returns the row's gold cell: the first non-empty of the ``|``-separated columns (``answer`` included)."""
    for column in gold_column.split("|"):
        cell = item.answer if column == "answer" else item.extra.get(column, "")
        if not _empty(cell):
            return cell
    return ""


def _options(item: Item, layout: BenchLayout) -> tuple[dict[str, str], str]:
    """Returns (letter -> option text, "") of ``item`` under ``layout.options``, or ({}, why not)."""
    if layout.options == "columns":  # a cell pandas reads as missing is no option to VLMEvalKit's build_prompt
        return {letter: text for letter, text in item.options.items() if not _empty(text)}, ""
    if layout.options == "none":
        return {}, ""
    cell = item.extra.get(layout.options_column, "")
    if _empty(cell):  # an open question of a mixed file; ScorerSpec.needs_options refuses it where it must not be
        return {}, ""
    texts = _list_cell(cell) if layout.options == "list" else _lettered_lines(cell)
    if texts is None or not 1 <= len(texts) <= len(string.ascii_uppercase):
        shape = "a Python list of option texts" if layout.options == "list" else "one '(A) text' line per option"
        return {}, f"column {layout.options_column!r} is not {shape}: {cell[:80]!r}"
    return texts, ""


def _list_cell(cell: str) -> dict[str, str] | None:
    """Returns a Python-list cell's items lettered A, B, ... (a leading own letter dropped), or None (also for a
    cell that is no literal, however crafted: ``tsv.literal_cell``)."""
    values, _ = literal_cell(cell)
    if not isinstance(values, (list, tuple)):
        return None
    options = {}
    for letter, value in zip(string.ascii_uppercase, map(str, values), strict=False):
        match = _LETTERED.match(value)
        options[letter] = match.group(3) if match and (match.group(1) or match.group(2)) == letter else value
    return options


def _lettered_lines(cell: str) -> dict[str, str] | None:
    """Returns the options of a text cell written one per line, each starting with its letter, or None."""
    options = {}
    for line in (line for line in cell.splitlines() if line.strip()):
        match = _LETTERED.match(line)
        if not match:
            return None
        options[match.group(1) or match.group(2)] = match.group(3).strip()
    return options or None


def _gold(cell: str, options: dict[str, str], layout: BenchLayout) -> tuple[str, str]:
    """Returns (the gold answer in the scorer's form, "") or ("", why it cannot be mapped)."""
    if layout.answer != "letter" or not options:  # an open row of a mixed file (MMMU) keeps its answer
        return cell, ""
    text = cell.strip()
    if text in options:
        return text, ""
    match = _LETTERED.match(text)
    if match and (match.group(1) or match.group(2)) in options:
        return match.group(1) or match.group(2), ""
    by_text = {value.strip(): letter for letter, value in options.items()}
    if text in by_text:
        return by_text[text], ""
    return "", (
        f"gold {cell[:60]!r} is neither an option letter ({', '.join(options)}), '<letter>. "
        "text', nor an option's text; fix the row or the layout's answer/gold_column"
    )


def render_question(item: Item, prompt: PromptParts, mcq_hint: str) -> str:
    """Returns the text of ``item``'s user turn before the instruction, as ``prompt`` builds it."""
    fields = {**item.extra, "question": item.question, "mcq_hint": mcq_hint}
    fields["options"] = _options_block(item.options, prompt, fields) if item.options else ""
    fields.update(_lines_fields(prompt.parts, item.extra))
    text = "".join(_fill(part, fields) for part in prompt.parts)
    for literal in prompt.remove:
        text = text.replace(literal, "")
    return text


LINES = ":lines"
"""Suffix of a placeholder that writes a Python-list cell one item per line (``{candidates:lines}``)."""


def _lines_fields(parts: list[str], extra: dict[str, str]) -> dict[str, str]:
    """Returns the ``{<column>:lines}`` fields ``parts`` name: each list cell's items joined by newlines ("" when
    the cell is missing or not a Python list, however crafted, so the part is left out)."""
    fields = {}
    for name in (name for part in parts for name in _FIELD.findall(part) if name.endswith(LINES)):
        values, _ = literal_cell(extra.get(name.removesuffix(LINES), ""))
        fields[name] = "\n".join(map(str, values)) if isinstance(values, (list, tuple)) else ""
    return fields


def _options_block(options: dict[str, str], prompt: PromptParts, fields: dict[str, str]) -> str:
    lines = prompt.options_joiner.join(
        _fill(prompt.option, {"letter": letter, "text": text}) for letter, text in options.items()
    )
    return _fill(prompt.options_header, fields) + lines + _fill(prompt.options_footer, fields)


def _fill(template: str, fields: dict[str, str]) -> str:
    """Returns ``template`` with each ``{field}`` replaced, or "" when a named field is missing or empty."""
    names = _FIELD.findall(template)
    if any(_empty(fields.get(name)) for name in names):
        return ""
    return _FIELD.sub(lambda match: fields[match.group(1)], template)


def _empty(value: str | None) -> bool:
    """Returns whether a cell counts as missing, as VLMEvalKit's ``pd.read_csv`` reads it: absent, blank, or one
    of pandas' default missing-value strings (``NA_STRINGS``)."""
    return value is None or value.strip() in NA_STRINGS
