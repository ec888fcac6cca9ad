"""The one config loader (issue 43, item 3): a composed config checked against its typed schema (a dataclass),
every error reported at once.

    config = load_config(TablesConfig, cfg, "conf/make_tables.yaml")

A valid config is merged and converted exactly as before (``OmegaConf.merge(OmegaConf.structured(schema), cfg)``,
then ``OmegaConf.to_object``). A config that fails is read again to find every error: each top-level key is merged
on its own (a mistyped or unknown key), each nested dataclass section is converted on its own, deepest first (its
``__post_init__`` checks), and the whole is converted once every section is valid (the checks across sections).
One error is raised as it was before, unchanged; several are raised as one ``InvalidConfigError`` listing each on a
line, naming its key as the single message does. A ground-floor module: it imports only omegaconf and the
standard library.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import is_dataclass
from typing import Any, TypeVar

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

T = TypeVar("T")

CONFIG_ERRORS = (OmegaConfBaseException, ValueError, KeyError)
"""What a config mistake raises: OmegaConf's errors (an unknown, missing or mistyped key) and the typed configs'
``ValueError`` (a value their checks refuse); ``sparsectx.cli.config_check`` answers the same types."""

Check = Callable[[], None]
Explain = Callable[[str], "str | None"]


class InvalidConfigError(ValueError):
    """Several mistakes in one config: the message says how many and where, then one line per mistake.

    A ``ValueError``, as the single mistakes are, so callers and ``sparsectx.cli.config_check`` treat it alike.
    """

    def __init__(self, what: str, errors: list[str]) -> None:
        self.errors = errors
        super().__init__("\n".join([f"{len(errors)} errors in {what}:", *(f"  {error}" for error in errors)]))


def one_line(err: BaseException) -> str:
    """Returns ``err``'s message on one line: an OmegaConf error as ``<full key>: <message>`` (without the
    ``full_key:`` / ``object_type=`` lines ``OmegaConfBaseException.__str__`` appends), a ``KeyError`` without the
    quotes ``KeyError.__str__`` adds."""
    if isinstance(err, OmegaConfBaseException) and getattr(err, "msg", None):
        key = getattr(err, "full_key", None)
        text = f"{key}: {err.msg}" if key else str(err.msg)
    elif isinstance(err, KeyError) and err.args:
        text = str(err.args[0])
    else:
        text = str(err)
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def load_config(
    schema: type[T],
    cfg: DictConfig,
    what: str,
    *,
    checks: Iterable[Check] = (),
    explain: Explain | None = None,
    typed: Mapping[str, type] | None = None,
) -> T:
    """Returns ``cfg`` merged into ``schema`` and converted to it; raises every error the config has.

    Args:
        schema: the typed config (a dataclass; nested dataclasses are its sections).
        cfg: the composed config.
        what: names the config in the message of several errors (``conf/train.yaml``).
        checks: checks that run before the schema's (each raises one error naming its key); their errors are
            reported with the others.
        explain: rewrites the message of a ``ValueError`` the conversion raises (a note on the key to set), or
            returns None for one that only repeats an error of ``checks``.
        typed: top-level fields the schema types ``Any`` (so its module stays light) and the dataclass each one's
            value is checked against.

    Raises:
        the one error as the plain merge and conversion (or the first check) raised it, or ``InvalidConfigError`` with
        every error when there are several.
    """
    check_errors = [error for check in checks if (error := failure(check)) is not None]
    try:
        merged = OmegaConf.merge(structure(schema, typed), cfg)
    except CONFIG_ERRORS as err:
        first: BaseException = err
    else:
        try:
            loaded = OmegaConf.to_object(merged)
        except CONFIG_ERRORS as err:
            first = explained(err, explain) or err
        else:
            if len(distinct(check_errors)) > 1:
                raise InvalidConfigError(what, distinct(check_errors))
            if check_errors:
                raise check_errors[0]
            return loaded  # type: ignore[return-value]
    errors = distinct([*check_errors, *every_error(structure(schema, typed), cfg, explain)])
    if len(errors) > 1:
        raise InvalidConfigError(what, errors) from None
    raise (check_errors[0] if check_errors else first) from None


def failure(check: Check) -> BaseException | None:
    """Returns the config error ``check`` raises, None when it passes."""
    try:
        check()
    except CONFIG_ERRORS as err:
        return err
    return None


def explained(err: BaseException, explain: Explain | None) -> BaseException | None:
    """Returns a conversion error as reported: a ``ValueError`` with ``explain``'s message (None when that
    repeats a check's error), any other error as raised."""
    if explain is None or not isinstance(err, ValueError):
        return err
    message = explain(str(err))
    return None if message is None else ValueError(message)


def structure(schema: type, typed: Mapping[str, type] | None) -> DictConfig:
    """Returns the empty structured config of ``schema``, with each of the ``typed`` fields structured as its
    dataclass."""
    node = OmegaConf.structured(schema)
    for key, section in (typed or {}).items():
        node[key] = OmegaConf.structured(section)
    return node


def every_error(merged: DictConfig, cfg: DictConfig, explain: Explain | None) -> list[BaseException]:
    """Returns every error of ``cfg`` against the empty structured config ``merged``: each top-level key merged
    on its own, then each section of the keys that merged converted on its own (``section_errors``)."""
    errors: list[BaseException] = []
    refused = set()
    for key in cfg:
        try:
            merged = OmegaConf.merge(merged, OmegaConf.masked_copy(cfg, [key]))
        except CONFIG_ERRORS as err:
            errors.append(err)
            refused.add(key)
    converted = section_errors(merged, skip=refused, whole=not errors)
    return errors + [error for err in converted if (error := explained(err, explain)) is not None]


def section_errors(node: DictConfig, skip: AbstractSet[Any] = frozenset(), whole: bool = True) -> list[BaseException]:
    """Returns the errors of converting each dataclass section below ``node`` on its own, deepest first; when
    they are all valid and ``whole``, the error of converting ``node`` itself (its checks across sections).

    ``OmegaConf.to_object`` builds the sections bottom-up and stops at the first error
    (``omegaconf/dictconfig.py:DictConfig._to_object`` converts each child before calling the class), so
    converting each section first finds the errors of all of them.
    """
    errors: list[BaseException] = []
    for key in node:
        if key in skip or OmegaConf.is_missing(node, key) or OmegaConf.is_interpolation(node, key):
            continue
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not child._is_none():
            errors += section_errors(child)
    if errors or not whole or not is_dataclass(OmegaConf.get_type(node)):
        return errors
    try:
        OmegaConf.to_object(node)
    except CONFIG_ERRORS as err:
        return [err]
    return []


def distinct(errors: list[BaseException]) -> list[str]:
    """Returns each error's one-line message (``one_line``), each message once, in order."""
    return list(dict.fromkeys(one_line(error) for error in errors))
