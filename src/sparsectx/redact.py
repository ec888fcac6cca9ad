"""Credentials out of everything a run records: the one redaction every recorded copy of a config goes through.

A config may carry a secret (a judge's ``base_url`` of the form ``https://user:token@host/v1`` or with an
``?api_key=`` query parameter, a key named like ``api_key``). Result JSONs, a training run's ``config.yaml`` and
``state/meta.json``, the W&B config and error messages are read by others (shared folders, W&B projects, logs),
so each gets ``redact``'s copy:

- in any URL (``scheme://...``, anywhere in a string): the userinfo before ``@`` and the value of every
  credential-like query parameter (``CREDENTIAL_PARAMS``, or a name ``SECRET_NAME`` matches) become ``REDACTED``;
- the value of a mapping key named like a secret (``SECRET_NAME``: ``api_key``, ``token``, ``password``,
  ``client_secret``, ``hf_token``, ...; of a flattened ``a.b.api_key`` the last part) becomes ``REDACTED``;
  ``None`` stays ``None`` (nothing to hide).

Only recorded copies are redacted: the run key and its hash are computed from the config as given, so a config
without credentials hashes as before, and a resume compares redacted copies on both sides. Redaction is
idempotent: a recorded copy redacted again is unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

REDACTED = "<redacted>"
"""What a credential is replaced by."""

SECRET_NAME = re.compile(
    r"(?:^|[_-])(?:api[_-]?key|apikey|secret|password|passwd|credentials?|private[_-]key)$"
    r"|(?:^|[_-])(?:access|auth|bearer|refresh|api|hf|wandb|github|session|security|id)[_-]token$"
    r"|^(?:token|auth|authorization)$",
    re.IGNORECASE,
)
"""Names of keys (and query parameters) whose value is a secret; look-alikes such as ``image_token``,
``max_new_tokens`` or ``api_key_env`` (the name of a variable, not its value) do not match."""

CREDENTIAL_PARAMS = frozenset({"key", "sig", "signature", "x-amz-signature", "x-amz-credential", "x-goog-signature"})
"""Query parameters that carry credentials although ``SECRET_NAME`` does not match them (``?key=``: Google's
API keys; signed URLs' signatures)."""

URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://(?:" + re.escape(REDACTED) + r"|[^\s'\"<>])+")
"""A URL inside free text (ends at whitespace, a quote or an angle bracket other than ``REDACTED``'s)."""


def is_secret_name(name: str) -> bool:
    """Returns whether a key or query parameter named ``name`` holds a secret (of ``a.b.name``, the last part)."""
    last = name.rsplit(".", 1)[-1]
    return bool(SECRET_NAME.search(last)) or last.lower() in CREDENTIAL_PARAMS


def _redact_query(query: str) -> str:
    parts = []
    for part in query.split("&"):
        name, equals, _ = part.partition("=")
        parts.append(f"{name}={REDACTED}" if equals and is_secret_name(unquote(name)) else part)
    return "&".join(parts)


def redact_url(url: str) -> str:
    """Returns ``url`` with its userinfo and credential query values replaced by ``REDACTED`` (else unchanged).

    Only ``scheme://`` URLs are read; a plain path (``/models/a@b?key=1``) is no URL and stays as it is.
    """
    scheme, sep, rest = url.partition("://")
    if not sep or not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", scheme):
        return url
    authority_end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:authority_end], rest[authority_end:]
    if "@" in authority:
        authority = f"{REDACTED}@{authority.rpartition('@')[2]}"
    before_fragment, hash_sign, fragment = tail.partition("#")
    path, question, query = before_fragment.partition("?")
    if question:
        query = _redact_query(query)
    return f"{scheme}://{authority}{path}{question}{query}{hash_sign}{fragment}"


def redact_text(text: str) -> str:
    """Returns ``text`` (a message, a config value) with every URL in it redacted (``redact_url``)."""
    return URL.sub(lambda match: redact_url(match.group(0)), text)


def redact(value: Any) -> Any:
    """Returns a copy of ``value`` (mappings, lists, strings, at any depth) fit to record: secret-named keys'
    values and URL credentials replaced by ``REDACTED``; ``value`` itself is not changed."""
    if isinstance(value, Mapping):
        return {
            key: REDACTED if item is not None and is_secret_name(str(key)) else redact(item)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return type(value)(redact(item) for item in value)
    if isinstance(value, str):
        return redact_text(value)
    return value
