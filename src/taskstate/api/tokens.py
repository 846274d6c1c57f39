"""taskstate's bearer tokens: HS256 JWTs signed with `[state_store] taskstate_secret_key`.

The option holds one or more secrets (separated by commas or whitespace). The first signs new
tokens; every one verifies, so a key is rotated by putting the new one first and dropping the
old one once its tokens have expired. A token names its key by `kid` (a digest of the secret,
never the secret). Claims say what the token may touch; `taskstate.api.auth` applies them.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jwt

from taskstate.errors import ConfigError, InvalidTokenError
from taskstate.settings import credential

AUDIENCE = "taskstate"
ALGORITHM = "HS256"
MIN_SECRET_LENGTH = 32
_DURATION = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


@dataclass(frozen=True)
class Claims:
    """What a token may touch. Empty `dag_ids` and `assets` and no `admin`: nothing at all."""

    subject: str
    dag_ids: tuple[str, ...] = ()  # fnmatch globs
    run_id: str | None = None
    task_id: str | None = None
    map_index: int | None = None
    try_number: int | None = None
    assets: tuple[str, ...] = ()  # asset identities: the name, else the uri
    read_only: bool = False
    admin: bool = False
    expires_at: float | None = None  # epoch seconds; None = never

    def payload(self, now: float) -> dict[str, Any]:
        """The JWT payload: audience, subject, issue time, expiry, and every claim that is set
        (None, False and empty claims left out)."""
        out: dict[str, Any] = {"aud": AUDIENCE, "sub": self.subject, "iat": int(now)}
        if self.expires_at is not None:
            out["exp"] = int(self.expires_at)
        optional = {
            "dag_ids": list(self.dag_ids),
            "run_id": self.run_id,
            "task_id": self.task_id,
            "map_index": self.map_index,
            "try_number": self.try_number,
            "assets": list(self.assets),
            "read_only": self.read_only,
            "admin": self.admin,
        }
        # Identity, not equality: map_index 0 == False must still be written.
        out.update({k: v for k, v in optional.items() if not (v is None or v is False or v == [])})
        return out

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> Claims:
        """Check every claim's type: a token signed by us but shaped wrongly is still refused."""
        try:
            return cls(
                subject=_typed(payload, "sub", str, required=True),
                dag_ids=tuple(_strings(payload, "dag_ids")),
                run_id=_typed(payload, "run_id", str),
                task_id=_typed(payload, "task_id", str),
                map_index=_typed(payload, "map_index", int),
                try_number=_typed(payload, "try_number", int),
                assets=tuple(_strings(payload, "assets")),
                read_only=bool(_typed(payload, "read_only", bool)),
                admin=bool(_typed(payload, "admin", bool)),
                expires_at=_typed(payload, "exp", int),
            )
        except (TypeError, ValueError) as exc:
            raise InvalidTokenError(f"the token's claims are malformed: {exc}") from None


def _typed(payload: Mapping[str, Any], name: str, kind: type, *, required: bool = False) -> Any:
    value = payload.get(name)
    if value is None:
        if required:
            raise ValueError(f"{name!r} is missing")
        return None
    if type(value) is not kind:
        raise TypeError(f"{name!r} must be a {kind.__name__}, got {type(value).__name__}")
    return value


def _strings(payload: Mapping[str, Any], name: str) -> list[str]:
    value = payload.get(name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise TypeError(f"{name!r} must be a list of non-empty strings")
    return value


def key_id(secret: str) -> str:
    """The `kid` naming a secret: a digest, so tokens never reveal it."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()[:16]


class SigningKeys:
    """The configured secrets: the first signs, every one verifies."""

    def __init__(self, secrets: Sequence[str]) -> None:
        if not secrets:
            raise ConfigError("[state_store] taskstate_secret_key holds no key")
        for secret in secrets:
            if len(secret) < MIN_SECRET_LENGTH:
                raise ConfigError(
                    f"[state_store] taskstate_secret_key: each key must be at least "
                    f"{MIN_SECRET_LENGTH} characters; generate one with "
                    "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
                )
        self._by_kid = {key_id(s): s for s in secrets}
        self._signing = secrets[0]
        self._verified: dict[str, Claims] = {}  # token -> its claims, once its signature held

    @classmethod
    def parse(cls, raw: str) -> SigningKeys:
        """The keys in `raw`, separated by commas or whitespace; the first one signs."""
        return cls([part for part in re.split(r"[\s,]+", raw) if part])

    @classmethod
    def load(cls, environ: Mapping[str, str] | None = None) -> SigningKeys | None:
        """The configured keys, or None when none is set (then nothing can be signed)."""
        raw = credential("taskstate_secret_key", environ)  # _CMD / _SECRET, as Airflow does
        return None if raw is None or not raw.strip() else cls.parse(raw)

    def issue(self, claims: Claims, now: float | None = None) -> str:
        """A signed JWT of `claims`, issued at `now` (default: the current time), with the
        signing key's id as `kid`."""
        payload = claims.payload(time.time() if now is None else now)
        return jwt.encode(
            payload, self._signing, algorithm=ALGORITHM, headers={"kid": key_id(self._signing)}
        )

    def verified(self, token: str, now: float | None = None) -> Claims | None:
        """The claims of a token `verify` accepted before (its expiry checked again), else
        None."""
        claims = self._verified.get(token)
        if claims is not None:
            _check_expiry(claims, now)
        return claims

    def verify(self, token: str, now: float | None = None) -> Claims:
        """The token's claims; `InvalidTokenError` saying why when it is not acceptable."""
        try:
            kid = jwt.get_unverified_header(token).get("kid")
        except jwt.PyJWTError:
            raise InvalidTokenError("the bearer token is not a JWT") from None
        secret = self._by_kid.get(kid) if isinstance(kid, str) else None
        if secret is None:
            raise InvalidTokenError(
                "the bearer token was signed with a key this server does not hold (rotated "
                "out?); create a new one with `taskstate token create`"
            )
        try:
            payload = jwt.decode(
                token,
                secret,
                algorithms=[ALGORITHM],
                audience=AUDIENCE,
                options={"require": ["sub", "aud"], "verify_exp": False},
            )
        except jwt.PyJWTError as exc:
            raise InvalidTokenError(f"the bearer token is not valid: {exc}") from None
        claims = Claims.from_payload(payload)
        _check_expiry(claims, now)
        if len(self._verified) >= _VERIFIED_MAX:  # bounded: forget all, re-verify on use
            self._verified.clear()
        self._verified[token] = claims
        return claims


_VERIFIED_MAX = 4096


def _check_expiry(claims: Claims, now: float | None) -> None:
    # Checked here against our clock (not PyJWT's) so tests and servers agree on "now".
    current = time.time() if now is None else now
    if claims.expires_at is not None and claims.expires_at <= current:
        raise InvalidTokenError("the bearer token has expired; create a new one")


def parse_duration(text: str) -> float | None:
    """`90s`, `30m`, `1h`, `7d`, `2w` → seconds; `never` → None."""
    if text.strip().lower() == "never":
        return None
    match = _DURATION.match(text)
    if match is None or int(match.group(1)) == 0:
        raise ValueError(
            f"{text!r} is not a duration; write a positive number and a unit (s, m, h, d, w), "
            "e.g. 1h or 7d, or never"
        )
    return int(match.group(1)) * _UNIT_SECONDS[match.group(2)]
