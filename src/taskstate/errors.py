"""Typed errors. Each subclasses the builtin a caller would already catch, and says what to do."""

from __future__ import annotations


class TaskStateError(Exception):
    """Base of every error taskstate raises on purpose."""


class InvalidValueError(TaskStateError, ValueError):
    """The value is JSON-typed but not storable (None, NaN/Inf, too large)."""


class ValueTooLargeError(InvalidValueError):
    """The stored JSON is larger than `[state_store] max_value_storage_bytes`."""


class UnsupportedValueTypeError(TaskStateError, TypeError):
    """Somewhere in the value is a type JSON cannot hold exactly (datetime, tuple, set, ...)."""


class InvalidKeyError(TaskStateError, ValueError):
    """The key is empty, too long, or holds control characters."""


class UpdateOperationError(TaskStateError, TypeError):
    """An update operation (`taskstate.ops`: `add`, `maximum`, ...) was given an operand it
    does not take, or met a value of a type it does not apply to (`add` on a string); nothing
    was written."""


class KeyTypeError(InvalidKeyError, TypeError):
    """The key is not a `str`."""


class InvalidRetentionError(TaskStateError, TypeError, ValueError):
    """`retention` is not None, a `timedelta` >= 0, or `NEVER_EXPIRE`."""


class InvalidScopeError(TaskStateError, ValueError):
    """A scope field is missing or malformed."""


class ConfigError(TaskStateError, ValueError):
    """A `[state_store]` / `[workers]` setting is invalid; the message names the option."""


class InvalidTokenError(TaskStateError, PermissionError):
    """A taskstate bearer token is malformed, forged, expired or signed with an unknown key."""


class AssetNotDeclaredError(TaskStateError, KeyError):
    """The task indexed an asset that is not among its inlets or outlets."""

    def __str__(self) -> str:  # KeyError would repr() the message; show it as written
        return str(self.args[0]) if self.args else ""


class AmbiguousAssetError(TaskStateError, ValueError):
    """The task has several assets and called a method without saying which."""


class KeyNotFoundError(TaskStateError, KeyError):
    """An operation that needs the key to exist (the API's PATCH) found it absent or expired."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class NaiveDatetimeError(TaskStateError, TypeError):
    """`as_of` is not a timezone-aware datetime (a naive one would mean a different instant on
    each machine); pass e.g. `datetime(..., tzinfo=timezone.utc)`."""


class HistoryUnavailableError(TaskStateError, LookupError):
    """The version that covered the asked instant is no longer kept (pruned by
    `[state_store] taskstate_history_versions` / `taskstate_history_retention_days`), or history
    is off (`taskstate_history_versions = 0`): there is no value to give, rather than a wrong
    one. Ask about a later instant, or keep more history."""


class VersionNotFoundError(TaskStateError, KeyError):
    """`restore` named a version of the key that does not exist or is no longer kept; see
    `history(key)` for the kept ones."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class PreconditionFailedError(TaskStateError, ValueError):
    """A conditional write's precondition (etag match, create-only) did not hold; nothing was
    written. Read the key again and retry."""


class BackendError(TaskStateError, RuntimeError):
    """The storage backend failed; nothing was written."""


class BackendUnavailableError(BackendError, ConnectionError):
    """The storage server could not be reached after bounded retries."""


class OutcomeUnknownError(BackendUnavailableError):
    """A write was sent and its answer lost — the connection to the database died during
    COMMIT and the store could not be asked afterwards, an HTTP answer never came or a proxy
    answered 502/504 (for an atomic update: and another writer changed the key before it could
    be read back) — so it may or may not have landed. It was not applied again, so it can
    never apply twice: read the key to see. The HTTP API answers it as 500 (never 503, which
    means "not applied")."""


class AccessDeniedError(BackendError, PermissionError):
    """The taskstate server refused the credentials (401) or the scope (403)."""


class StaleTryError(BackendError):
    """The server refused a task-state write from a try that is no longer the running one
    (fencing): a newer try of this task instance owns the state now; this one should stop."""


class BackendBusyError(BackendError, TimeoutError):
    """Another process held the state database's write lock for longer than the busy timeout,
    or (over HTTP) other writers changed the key under every attempt of an `update` /
    `compare_and_set` for the client's whole retry window; the operation did nothing."""


class OffloadedValueMissingError(BackendError):
    """A row names an offloaded object that is not in object storage."""


class DatabaseMissingError(BackendError, FileNotFoundError):
    """A read found no SQLite state database at its path (a mistyped path, or nothing written
    there yet). Reads that may not create the file raise it (the CLI's reads); writes create
    the file."""


class SchemaMissingError(BackendError):
    """The backend's tables are missing or outdated; run `taskstate db migrate`."""


class NativeStoreMethodError(TaskStateError, AttributeError):
    """On Airflow 3.3+ with `[state_store] taskstate_mode = native`, the task called a method
    that only taskstate's accessors have (`getattr(store, name, None)` still returns None)."""


class LostSubmissionError(TaskStateError, RuntimeError):
    """A try died between recording its intent to submit a job and saving the job's id, and
    the operator chose `on_lost_submission = "fail"`: a person must check the job system."""


class ConcurrentTryError(TaskStateError, RuntimeError):
    """Two tries of one task instance tried to submit at the same moment."""


class JobFailedError(TaskStateError, RuntimeError):
    """A deferred job ended without succeeding (or the trigger's event named none): the try
    fails, and the next try submits a new job under a new token."""
