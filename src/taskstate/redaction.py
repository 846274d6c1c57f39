"""Hiding secrets in anything taskstate prints: URLs, option mappings, error messages.

The one place that decides what a secret looks like. It errs towards hiding: a URL is never
parsed by `urllib` here, because a password with an unencoded `/`, `?`, `#` or `@`, or a
malformed `%` escape, makes a parser cut the URL somewhere else and print the password as
"path". Instead the user info runs to the last `@` after `scheme://`, and every query
parameter or option whose name looks like a credential is masked.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote

MASK = "***"

# Option and query-parameter names that hold credentials (libpq's `password`/`sslpassword`,
# fsspec/s3fs's `secret`/`key`/`token`, `client_secret`, `api_key`, `aws_secret_access_key`...).
_SECRET_NAME = re.compile(r"pass|pwd|secret|token|key|credential|auth|signature|sig$", re.I)
_QUERY_PARAM = re.compile(r"([?&;])([^=&;#]*)=([^&;#]*)")


def is_secret_name(name: str) -> bool:
    """Whether an option or query-parameter name looks like it holds a credential."""
    return bool(_SECRET_NAME.search(name))


def redact_url(url: str) -> str:
    """`url` with its password and credential-like query parameters replaced by `***`.

    Anything that is not `scheme://...` is returned unchanged (a file path, a class path).
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    userinfo, at, host = rest.rpartition("@")
    if at and ":" in userinfo:
        rest = f"{userinfo.partition(':')[0]}:{MASK}@{host}"
    return scheme + sep + _QUERY_PARAM.sub(_mask_param, rest)


def _mask_param(match: re.Match[str]) -> str:
    sep, name, value = match.groups()
    return f"{sep}{name}={MASK if is_secret_name(unquote(name)) else value}"


def url_secrets(url: str) -> list[str]:
    """The secret substrings of `url`, as written and percent-decoded, for `scrub`."""
    _, sep, rest = url.partition("://")
    if not sep:
        return []
    found: list[str] = []
    userinfo, at, _ = rest.rpartition("@")
    if at and ":" in userinfo:
        found.append(userinfo.partition(":")[2])
    for _, name, value in _QUERY_PARAM.findall(rest):
        if is_secret_name(unquote(name)):
            found.append(value)
    return [form for secret in found if secret for form in {secret, unquote(secret)}]


def redact_command(command: str) -> str:
    """A command line (an Airflow `_cmd` option) with every URL in it redacted."""
    return " ".join(redact_url(word) for word in command.split(" "))


def command_secrets(command: str) -> list[str]:
    """The credentials in the URLs of a `_cmd` command line, for masking in its errors."""
    return [secret for word in command.split() for secret in url_secrets(word)]


def scrub(text: str, secrets: Iterable[str]) -> str:
    """`text` (say, a driver's error message) with every one of `secrets` masked."""
    for secret in sorted(secrets, key=len, reverse=True):
        if secret:
            text = text.replace(secret, MASK)
    return text


def redact_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of an options mapping (fsspec `storage_options`, connect kwargs) with every
    credential-named entry masked, at any depth; string values that are URLs are redacted."""
    return {
        name: MASK if is_secret_name(str(name)) and value else redact_value(value)
        for name, value in options.items()
    }


def redact_value(value: Any) -> Any:
    """A value as it may be shown: URLs without their credentials, mappings with their
    credential-named entries masked (`redact_options`), lists and tuples item by item."""
    if isinstance(value, str):
        return redact_url(value)
    if isinstance(value, Mapping):
        return redact_options(value)
    if isinstance(value, (list, tuple)):
        return [redact_value(item) for item in value]
    return value


def redact_json_options(text: str) -> str:
    """A JSON object of options (as set in airflow.cfg) with its secrets masked; text that is
    not a JSON object is hidden entirely, since nothing says which part of it is secret."""
    try:
        options = json.loads(text)
    except ValueError:
        return MASK
    if not isinstance(options, dict):
        return MASK
    return json.dumps(redact_options(options), ensure_ascii=False)
