"""Who is calling (authentication) and what they may touch (authorisation), as one dependency.

An `Authenticator` (async) looks at a request and returns a `Principal`, None when it carries
no credentials it recognises, or raises `Unauthenticated` for credentials it recognises but
refuses. `Auth` tries its authenticators in order; standalone there is one (taskstate tokens),
inside Airflow the plugin adds Airflow's own (auth manager / FAB). A `Principal` answers
"may I do METHOD on this task scope / asset?"; the routes ask before reading or writing.
401 is for who, 403 for what.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Awaitable, Callable, Sequence
from typing import Literal, Protocol

import jwt
from fastapi import HTTPException, Request, status

from taskstate.api.tokens import AUDIENCE, Claims, SigningKeys
from taskstate.errors import InvalidTokenError
from taskstate.scope import AssetScope

Method = Literal["GET", "PUT", "DELETE"]


class Principal(Protocol):
    """An authenticated caller."""

    @property
    def subject(self) -> str:
        """Recorded as `last_updated_by.subject` on the caller's writes."""
        ...

    @property
    def admin(self) -> bool:
        """May see the server's own details (backend, version, metrics)."""
        ...

    @property
    def try_number(self) -> int | None:
        """A task-instance token's try: its writes are fenced to that try (else None)."""
        ...

    @property
    def task_instance(self) -> tuple[str, str, str, int] | None:
        """The (dag_id, run_id, task_id, map_index) a task-instance token was minted for."""
        ...

    def may_task(
        self, dag_id: str, run_id: str, task_id: str, map_index: int | None, method: Method
    ) -> bool:
        """`map_index` None: every map index of the task (a clear with `all_map_indices`)."""
        ...

    def may_dag(self, dag_id: str, run_id: str | None, method: Method) -> bool:
        """Whether METHOD is allowed on any task instance of this DAG (of this run, when
        `run_id` is given). False: none at all, so the DAG's listings answer 403 rather than
        an empty page that would read "holds no state" (Airflow's own DAG routes answer 403)."""
        ...

    def may_asset(self, asset: AssetScope, method: Method) -> bool:
        """Whether METHOD is allowed on the state of `asset`."""
        ...


class Unauthenticated(HTTPException):
    """401, with `WWW-Authenticate: Bearer`: no bearer token, or one not valid here."""

    def __init__(self, detail: str) -> None:
        super().__init__(
            status.HTTP_401_UNAUTHORIZED, detail, headers={"WWW-Authenticate": "Bearer"}
        )


class Forbidden(HTTPException):
    """403: the caller is known but may not do this."""

    def __init__(self, detail: str) -> None:
        super().__init__(status.HTTP_403_FORBIDDEN, detail)


Authenticator = Callable[[Request], Awaitable["Principal | None"]]


class OpenAccess:
    """No secret key and a loopback server: everything is allowed (the server says so)."""

    subject = "anonymous"
    admin = True
    try_number = None
    task_instance = None

    def may_task(
        self, dag_id: str, run_id: str, task_id: str, map_index: int | None, method: Method
    ) -> bool:
        """Always True: open access allows every task instance."""
        return True

    def may_dag(self, dag_id: str, run_id: str | None, method: Method) -> bool:
        """Always True: open access allows every DAG."""
        return True

    def may_asset(self, asset: AssetScope, method: Method) -> bool:
        """Always True: open access allows every asset."""
        return True


class TokenPrincipal:
    """A taskstate token: it may touch only what its claims name."""

    def __init__(self, claims: Claims) -> None:
        self.claims = claims
        self.subject = claims.subject
        self.admin = claims.admin
        self.try_number = claims.try_number
        self.task_instance: tuple[str, str, str, int] | None = None
        if claims.try_number is not None:  # minted for one task instance (worker.task_token)
            c = claims
            if len(c.dag_ids) == 1 and c.run_id and c.task_id and c.map_index is not None:
                self.task_instance = (c.dag_ids[0], c.run_id, c.task_id, c.map_index)

    def _method_ok(self, method: Method) -> bool:
        return method == "GET" or not self.claims.read_only

    def may_task(
        self, dag_id: str, run_id: str, task_id: str, map_index: int | None, method: Method
    ) -> bool:
        """Whether the claims cover the DAG and run and, unless admin, the task and map index."""
        c = self.claims
        if not self.may_dag(dag_id, run_id, method):
            return False
        return c.admin or (
            c.task_id in (None, task_id) and (c.map_index is None or c.map_index == map_index)
        )

    def may_dag(self, dag_id: str, run_id: str | None, method: Method) -> bool:
        """Whether the method is allowed and the claims' DAG-id globs (and run, if pinned) cover
        this DAG and run; admin tokens cover every DAG."""
        c = self.claims
        if not self._method_ok(method):
            return False
        if c.admin:
            return True
        return any(fnmatch.fnmatchcase(dag_id, pattern) for pattern in c.dag_ids) and (
            run_id is None or c.run_id in (None, run_id)
        )

    def may_asset(self, asset: AssetScope, method: Method) -> bool:
        """Whether the method is allowed and the claims name the asset (admin: every asset)."""
        if not self._method_ok(method):
            return False
        return self.claims.admin or asset.identity in self.claims.assets


def bearer(request: Request) -> str | None:
    """The request's bearer token, or None without an `Authorization: Bearer` header."""
    return parse_bearer(request.headers.get("authorization"))


def parse_bearer(header: str | None) -> str | None:
    """The credentials of an `Authorization` header value when its scheme is `Bearer` (any
    case), else None."""
    scheme, _, credentials = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip():
        return None
    return credentials.strip()


class TokenAuthenticator:
    """Accepts taskstate tokens (audience `taskstate`); leaves other bearers to the others."""

    def __init__(self, keys: SigningKeys) -> None:
        self.keys = keys

    async def __call__(self, request: Request) -> Principal | None:
        """The principal of a valid taskstate token, None for no token or another issuer's;
        401 for a taskstate token that fails verification."""
        token = bearer(request)
        if token is None:
            return None
        try:
            # A token verified before is not decoded again (a worker sends one token for
            # every request); only its expiry is checked.
            claims = self.keys.verified(token)
            if claims is None:
                if not is_taskstate_token(token):
                    return None
                claims = self.keys.verify(token)
        except InvalidTokenError as exc:
            raise Unauthenticated(str(exc)) from None
        return TokenPrincipal(claims)


def is_taskstate_token(token: str) -> bool:
    """Ours to check (audience `taskstate`, or not a JWT at all), or another issuer's."""
    try:
        payload = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        return True  # not a JWT at all: ours to refuse with a clear message
    audience = payload.get("aud")
    return audience == AUDIENCE or (isinstance(audience, list) and AUDIENCE in audience)


class Auth:
    """The FastAPI dependency: the first authenticator that recognises the request decides."""

    def __init__(self, authenticators: Sequence[Authenticator], *, open_access: bool) -> None:
        self.authenticators = tuple(authenticators)
        self.open_access = open_access

    @classmethod
    def standalone(cls, keys: SigningKeys | None) -> Auth:
        """Auth for a standalone server: taskstate tokens signed by `keys`, or open access when
        there are no keys."""
        if keys is None:
            return cls((), open_access=True)
        return cls((TokenAuthenticator(keys),), open_access=False)

    async def __call__(self, request: Request) -> Principal:
        """The caller: the first principal an authenticator recognises, else open access if
        allowed, else 401."""
        for authenticate in self.authenticators:
            principal = await authenticate(request)
            if principal is not None:
                return principal
        if self.open_access:
            return OpenAccess()
        if bearer(request) is not None:
            raise Unauthenticated("the bearer token is not valid here")
        raise Unauthenticated(
            "authentication required: send Authorization: Bearer <token> "
            "(create one with `taskstate token create`)"
        )


def require_task(
    principal: Principal,
    dag_id: str,
    run_id: str,
    task_id: str,
    map_index: int | None,
    method: Method,
) -> None:
    """Raise 403 unless `principal` may use METHOD on the task instance's state."""
    if not principal.may_task(dag_id, run_id, task_id, map_index, method):
        where = "every map index" if map_index is None else f"map_index={map_index}"
        raise Forbidden(
            f"{principal.subject!r} may not {method} the task state of dag_id={dag_id!r}, "
            f"run_id={run_id!r}, task_id={task_id!r}, {where}"
        )


def require_dag(principal: Principal, dag_id: str, run_id: str | None, method: Method) -> None:
    """Raise 403 unless `principal` may use METHOD on some task state of the DAG (and run)."""
    if not principal.may_dag(dag_id, run_id, method):
        run = "" if run_id is None else f", run_id={run_id!r}"
        raise Forbidden(
            f"{principal.subject!r} may not {method} any task state of dag_id={dag_id!r}{run}: "
            "the token or role does not cover this DAG"
        )


def require_asset(principal: Principal, asset: AssetScope, method: Method) -> None:
    """Raise 403 unless `principal` may use METHOD on the asset's state."""
    if not principal.may_asset(asset, method):
        raise Forbidden(
            f"{principal.subject!r} may not {method} the state of asset {asset.identity!r}"
        )
