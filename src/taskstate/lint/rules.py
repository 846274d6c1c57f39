"""The rule table: every code `taskstate lint` can report, in one place.

Each row says what is wrong (the one-line message, formatted with facts from the user's code),
why it hurts, and which version-aware advice follows it. Codes are stable: a code is never
reused for a different check. A message that starts with "possible" marks a heuristic rule.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Severity(str, enum.Enum):
    """How serious a rule's findings are: error, warning or info."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class Advice(str, enum.Enum):
    """Which version-aware recommendation a rule's finding ends with (see airflow_version.py)."""

    TASK_STATE = "task_state"
    ASSET_STATE = "asset_state"
    MIXIN = "mixin"
    SUBMIT_POLL = "submit_poll"
    NONE = "none"


@dataclass(frozen=True)
class Rule:
    """One lint rule: its code, name, severity, message template, reason and advice."""

    code: str
    name: str
    severity: Severity
    message: str
    why: str
    advice: Advice = Advice.NONE
    fixable: bool = False

    @property
    def heuristic(self) -> bool:
        """True for rules whose message starts with "possible": guesses that may be wrong."""
        return self.message.startswith("possible")


def _table(*rules: Rule) -> dict[str, Rule]:
    return {rule.code: rule for rule in rules}


E, W, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO

RULES: dict[str, Rule] = _table(
    # --- TS1xx: Airflow Variables used as task state -------------------------------------------
    Rule(
        "TS101",
        "variable-task-state",
        E,
        "Variable {key} is written from a task to hold per-run/per-retry state",
        "Variables are global: any task or DAG run can overwrite them, and nothing scopes them "
        "to a task instance or a retry.",
        Advice.TASK_STATE,
    ),
    Rule(
        "TS102",
        "variable-watermark",
        E,
        "Variable {key} holds a watermark",
        "A watermark in a Variable is global: any DAG or task can overwrite it, and it is not "
        "scoped to the asset it describes.",
        Advice.ASSET_STATE,
    ),
    Rule(
        "TS103",
        "variable-reconnect-or-submit",
        E,
        "hand-rolled reconnect-or-submit on Variable {key}",
        "It reimplements ResumableJobMixin without its guarantees: the Variable is global, two "
        "runs race on it, and a crash between submit and Variable.set submits a duplicate job.",
        Advice.MIXIN,
    ),
    Rule(
        "TS104",
        "variable-set-in-task",
        W,
        "possible task state in Variable {key}: a task writes a Variable at run time",
        "A Variable written by a task is global state shared by every DAG run and retry; if "
        "it tracks progress of this task, it belongs in a state store. Shared configuration "
        "written on purpose can keep it (add `# noqa: TS104`).",
        Advice.TASK_STATE,
    ),
    Rule(
        "TS105",
        "variable-get-state",
        W,
        "possible task state read from Variable {key}",
        "The key names per-run state (a cursor, offset or job id); kept in a Variable it is "
        "shared by every DAG run and retry.",
        Advice.TASK_STATE,
    ),
    # --- TS2xx: XCom used to survive retries ---------------------------------------------------
    Rule(
        "TS201",
        "xcom-retry-state",
        E,
        "XCom {key} is pushed and read back by the same task, but XCom does not survive a retry",
        "XCom is scoped to a DAG run and cleared before each new try on Airflow 3, so a retry "
        "does not find what the failed try pushed.",
        Advice.TASK_STATE,
    ),
    Rule(
        "TS202",
        "xcom-job-id",
        W,
        "possible retry state: job id pushed to XCom {key}",
        "If the XCom is meant to let a retry find the job, it will not: XCom is cleared before "
        "each new try on Airflow 3. For handing the id to downstream tasks XCom is right.",
        Advice.MIXIN,
    ),
    # --- TS3xx: submit-and-poll ----------------------------------------------------------------
    Rule(
        "TS301",
        "submit-without-wait",
        W,
        "{operator} submits with {param}=False{sensor_note}",
        "A green submit task only means the job was accepted, not that it succeeded: downstream "
        "tasks, alerts and SLAs must hang off the sensor, and the submit task can still "
        "resubmit a duplicate on retry.",
        Advice.SUBMIT_POLL,
    ),
    Rule(
        "TS302",
        "submit-task-and-sensor",
        W,
        "possible submit-and-poll split: task {task} submits, sensor {sensor} polls",
        "A green submit task only means the job was accepted; the submit task can resubmit a "
        "duplicate on retry, and downstream tasks must depend on the sensor, not on submit.",
        Advice.SUBMIT_POLL,
    ),
    Rule(
        "TS303",
        "deferrable-without-wait",
        INFO,
        "{operator} has deferrable=True but no explicit wait_for_termination=True",
        "deferrable=True does not imply waiting for the job: say wait_for_termination=True so "
        "the task's success visibly means the job's success (on these operators it defaults to "
        "True today). The deferred path never goes through "
        "ResumableJobMixin, so durable=True protects nothing there.",
        Advice.SUBMIT_POLL,
    ),
    # --- TS4xx: ResumableJobMixin --------------------------------------------------------------
    Rule(
        "TS401",
        "mixin-execute",
        E,
        "{cls}.execute() never calls self.execute_resumable(context)",
        "The mixin only reconnects to a running job when execute() goes through "
        "execute_resumable(); custom logic there submits a fresh job on every retry.",
        Advice.MIXIN,
    ),
    Rule(
        "TS402",
        "mixin-external-id-key",
        E,
        "{cls} leaves external_id_key unset",
        "Without its own external_id_key the job id is stored under the default "
        "'remote_job_id'; set a descriptive key once and never rename it while task instances "
        "are in flight.",
        Advice.MIXIN,
    ),
    Rule(
        "TS403",
        "mixin-no-retries",
        W,
        "{cls} runs with retries=0",
        "With no retry there is nothing to reconnect to: the mixin's crash safety never acts.",
        Advice.MIXIN,
    ),
    Rule(
        "TS404",
        "mixin-submit-returns-none",
        E,
        "{cls}.submit_job() can return None",
        "When submit_job returns None no id is stored, so the crash-safety guarantee is "
        "silently off and every retry submits a new job.",
        Advice.MIXIN,
    ),
    Rule(
        "TS405",
        "durable-false-unexplained",
        W,
        "durable=False without a comment saying why",
        "durable=False turns crash recovery off: a worker crash then submits a duplicate job. "
        "Keep it only when intended (tests, a job system that dedupes) and say so beside it.",
        Advice.MIXIN,
    ),
    Rule(
        "TS406",
        "durable-noop-before-3-3",
        INFO,
        "durable=True on {operator} has no effect on Airflow {version}{unless}",
        "Providers' durable mode needs Airflow 3.3's ResumableJobMixin and state store; below "
        "3.3 their stand-in always submits a fresh job, so a retry after a crash pays for a "
        "duplicate.",
        Advice.MIXIN,
    ),
    Rule(
        "TS407",
        "mixin-result-dropped",
        W,
        "possible lost result: {cls}.execute() calls execute_resumable() but does not return it",
        "execute_resumable() returns the job's result (also after a reconnect); an execute() "
        "that drops it pushes something else to XCom. Fine when deliberate, e.g. returning an "
        "id the operator tracks itself.",
        Advice.MIXIN,
    ),
    Rule(
        "TS408",
        "defer-before-persist",
        W,
        "possible lost job: {cls}.{method}() submits {name} and calls self.defer() without "
        "saving it first",
        "A worker that dies between the submission and defer() (or a retry that runs execute() "
        "again) submits a second job: only the trigger's kwargs knew the first. Save the id in "
        "task_state_store before deferring and defer on the stored id on the next try; "
        "taskstate's ResumableJobMixin.execute_deferrable does both, with an idempotency token "
        "for the submission itself (docs/deferrable.md).",
    ),
    Rule(
        "TS409",
        "trigger-progress-in-self",
        W,
        "possible lost progress: {cls}.run() keeps self.{attr} only on the trigger instance",
        "A triggerer that dies or is redeployed makes Airflow re-create the trigger from its "
        "kwargs elsewhere: attributes set in run() start over, pages are read again and events "
        "fire twice. Keep the cursor in state: taskstate's TriggerStateMixin gives the trigger "
        "task_state_store / asset_state_store with aget/aset (docs/deferrable.md).",
    ),
    Rule(
        "TS410",
        "provider-operator-not-durable",
        INFO,
        "{operator} submits a second job when a retry follows a crash ({where})",
        "A worker killed while this operator waits leaves its job running, and the retry starts "
        "another one (a second dbt build, Batch job, query...). taskstate.providers has the same "
        "operator, same arguments and result, on ResumableJobMixin: the retry reconnects to the "
        "job instead (blocking and deferrable mode; see docs/providers.md).",
        Advice.NONE,
    ),
    # --- TS5xx: state store calls --------------------------------------------------------------
    Rule(
        "TS501",
        "non-json-value",
        E,
        "{store}.set({key}) stores {what}, which is not a JSON value",
        "State values are JSON (str, int, float, bool, list, dict); None, datetime, tuples, "
        "sets, bytes and other objects are rejected at run time or come back changed.",
        Advice.NONE,
    ),
    Rule(
        "TS502",
        "key-dot-slash",
        W,
        "state key {key} contains a dot or a slash",
        "Keys are short descriptive names; dots and slashes are read as paths by some "
        "interfaces (Airflow 3.3.2's REST routes, shells, URLs).",
        Advice.NONE,
    ),
    Rule(
        "TS503",
        "mapped-asset-constant-key",
        W,
        "possible lost update: mapped task {task} writes asset key {key} from every map index",
        "asset_state_store is shared by all map indices: with one constant key, the last "
        "index to write wins. Use a key per index, or let one index write.",
        Advice.NONE,
    ),
    Rule(
        "TS504",
        "mapped-clear",
        W,
        "possible fleet-wide wipe: {store}.clear() inside mapped task {task}",
        "In a mapped task, task_state_store.clear() clears only this map index, and "
        "asset_state_store's clear() wipes the asset for every index at once. A wipe across "
        "all indices belongs to the CLI or the API, run from a downstream task.",
        Advice.NONE,
    ),
    Rule(
        "TS505",
        "asset-not-declared",
        E,
        "task {task} indexes asset_state_store[{asset}] but {asset} is not in its inlets/outlets",
        "A task can only read and write the state of assets it declares; anything else is a "
        "KeyError at run time (or asset_state_store is None when the task declares no assets).",
        Advice.ASSET_STATE,
    ),
    Rule(
        "TS506",
        "job-id-default-retention",
        INFO,
        "possible early expiry: job id {key} is stored with the default retention",
        "Task state expires after [state_store] default_retention_days (30 by default); a job "
        "id that a late retry or a clear must still find needs retention=NEVER_EXPIRE.",
        Advice.NONE,
    ),
    Rule(
        "TS507",
        "native-accessor-method",
        E,
        "{call} does not exist on Airflow {version}'s native accessor: {todo}",
        "From Airflow 3.3 the task context holds Airflow's own accessors unless [state_store] "
        "taskstate_mode = taskstate keeps taskstate's; they have only get, set, delete and clear "
        "(asset accessors also their async forms), so the call raises AttributeError when the "
        "task runs.",
        Advice.NONE,
    ),
    # --- TS6xx: timestamps ---------------------------------------------------------------------
    Rule(
        "TS601",
        "naive-utc-timestamp",
        W,
        "{call}() returns a naive datetime",
        "utcnow()/utcfromtimestamp() return naive datetimes that other code reads as local "
        "time; they are deprecated since Python 3.12. Stored timestamps need an explicit UTC "
        "offset: datetime.now(tz=timezone.utc).isoformat().",
        Advice.NONE,
        fixable=True,
    ),
    # --- TS9xx: the file itself ----------------------------------------------------------------
    Rule(
        "TS901",
        "unparsable-file",
        E,
        "file cannot be checked: {error}",
        "Nothing in a file that does not parse can be checked (and Airflow cannot load it).",
        Advice.NONE,
    ),
)
