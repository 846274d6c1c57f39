"""Discovery: which DAGs, runs, task instances and assets hold live state, one page at a time,
seen through what a caller may read (the HTTP API's discovery routes and the UI use it).

Every listing is indexed backend queries, never a read of every row:
- the distinct DAGs / runs / task instances / assets come from `StateBackend.groups`, a skip
  scan over the namespace index (one seek per distinct item in range, each landing on a live
  row: expired rows never show);
- a token's DAG-id glob narrows the range to its literal prefix (`etl_*` seeks only among
  namespaces starting `etl_`) and becomes an SQL LIKE pattern with `_`/`%` escaped, so `etl_*`
  never matches `etlx`;
- items are found only as far as the page needs them (`offset + limit + 1`: the one past the
  page says more follow, and the total is then that lower bound, `Page.exact` False), so a first
  page seeks ~`limit` times however many DAGs, runs or assets there are (a run's task
  instances, ordered by map index as a number, are all found);
- key counts are computed for the page's items only, each an index range count that stops at
  `KEY_COUNT_CAP + 1` (shown as "10000+"); a page of every DAG reads the backend's count
  catalog instead (`StateBackend.dag_counts`: a few rows per DAG, kept by the writes that
  create or delete keys, less the DAG's expired rows not yet cleaned), so its cost does not
  follow the number of keys each DAG holds; where the catalog holds DAG ids in order
  (SQLite: `StateBackend.live_dags`), the page's DAGs come from it too, without a skip scan.

Why a skip scan and not a scope catalog (a table of namespaces kept in each write's
transaction) or namespace components as columns: a catalog of namespaces costs every `set` a
second statement and a second lock; the columns would widen every row and every index for what
the namespace index already orders. The skip scan costs the write path nothing, and a listing
reads one index entry per distinct item (a DAG's runs, a run's task instances) plus one range
count per item on the page. The count catalog behind `/dags` is kept only where a key is
created or deleted (an overwrite pays nothing), in several rows per DAG so that a DAG's
writers rarely wait on one another (docs/backends.md, "Key counts of /dags").

A search (`pattern`, Airflow's `dag_id_pattern`: case-insensitive LIKE `%term%`) filters the
distinct DAG ids the skip scan found, in the server, before the page is cut: one id per DAG
crosses from the database, never a row, and the browser gets one page.

A token that pins a run, task or map index (`Reach`) is honoured in SQL too: counts cover only
what it may read, and items where it may read nothing are left out (so for such a token every
candidate item is counted, not only the page's).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from taskstate.backends.base import StateBackend, like_matcher
from taskstate.scope import ASSET_PREFIX, SEP, AssetScope, parse_namespace, task_prefix
from taskstate.stored import Page

KEY_COUNT_CAP = 10_000  # key counts stop here: a count of KEY_COUNT_CAP + 1 means "more"
TASKS = "t" + SEP  # every task namespace starts with it

MayTask = Callable[[str, str, str, "int | None"], bool]
MayAsset = Callable[[AssetScope], bool]


@dataclass(frozen=True)
class Reach:
    """What a caller may list, as far as the database can narrow it: DAG-id globs (fnmatch;
    None = every DAG) and a pinned run, task and map index. The `may_task` / `may_asset`
    predicates the listings take decide the rest, item by item; at the DAG and run levels they
    see the pinned fields, or "" for a field not pinned."""

    dag_globs: tuple[str, ...] | None = None
    run_id: str | None = None
    task_id: str | None = None
    map_index: int | None = None

    @property
    def pinned(self) -> bool:
        """Whether any of the run, task and map index is pinned."""
        return (self.run_id, self.task_id, self.map_index) != (None, None, None)


EVERYTHING = Reach()


def _allow_all_tasks(dag_id: str, run_id: str, task_id: str, map_index: int | None) -> bool:
    return True


def _allow_all_assets(asset: AssetScope) -> bool:
    return True


def glob_to_like(glob: str) -> tuple[str, str]:
    """An fnmatch glob as (literal prefix, SQL LIKE pattern with escape `\\`). The prefix bounds
    the index range to seek in; the pattern (`%`, `_` and `\\` in the name escaped) filters the
    fields found. A glob with a `[...]` class has no LIKE equivalent: the pattern is then the
    prefix followed by `%` (the caller's predicate filters exactly)."""
    cut = min((i for i, c in enumerate(glob) if c in "*?["), default=len(glob))
    prefix = glob[:cut]
    if "[" in glob:
        return prefix, _escape(prefix) + "%"
    like = "".join("%" if c == "*" else "_" if c == "?" else _escape(c) for c in glob)
    return prefix, like


def _found_all(_dag_id: str) -> bool:
    return True


def id_search(pattern: str) -> Callable[[str], bool]:
    """Airflow's `dag_id_pattern`: `ILIKE '%term%'` (wildcards `%` and `_`, escape `\\`), and
    `a|b` for either term, as Airflow 3's search parameters read it."""
    terms = [term.strip() for term in pattern.split("|") if term.strip()] or [pattern]
    matches = [like_matcher(f"%{term.lower()}%") for term in terms]
    return lambda text: any(match(text.lower()) for match in matches)


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _window(items: list[str], limit: int, offset: int) -> list[str]:
    return items[offset : offset + limit] if limit > 0 else []


def _first(
    fetch: Callable[[int], list[str]], keep: Callable[[str], bool], limit: int, offset: int
) -> tuple[list[str], bool]:
    """The items `keep` accepts, in order, as far as a page needs them: `offset + limit + 1`
    (the one past the page says more follow), so a first page seeks ~`limit` times whatever
    the range holds. `fetch(n)` gives the first `n` candidates (-1: all); `n` doubles while
    `keep` turns some down. Returns (items, whether that is all of them); `limit` 0 wants all."""
    want = offset + limit + 1
    n = want if limit > 0 else -1
    while True:
        got = fetch(n)
        kept = [item for item in got if keep(item)]
        if n < 0 or len(got) < n:
            return kept, True
        if len(kept) >= want:
            return kept[:want], False
        n *= 2


class Discovery:
    """The listings, over one backend at one moment (`now`: expired rows never show)."""

    def __init__(self, backend: StateBackend, now: float) -> None:
        self.backend = backend
        self.now = now

    def _count(self, prefix: str, *, exact: bool = False) -> int:
        return self.backend.count(prefix, self.now, exact=exact, cap=KEY_COUNT_CAP + 1)

    def _visible(
        self, dag_id: str, run_id: str | None, task_id: str | None, map_index: int | None
    ) -> int:
        """Live keys under the given fields (None: any), counted in index ranges; capped."""
        if run_id is None:
            if task_id is None and map_index is None:
                return self._count(task_prefix(dag_id))
            runs = self.backend.groups(task_prefix(dag_id), self.now)
            return self._sum(self._visible(dag_id, run, task_id, map_index) for run in runs)
        if map_index is None:
            return self._count(task_prefix(dag_id, run_id, task_id))
        if task_id is not None:
            return self._count(task_prefix(dag_id, run_id, task_id) + str(map_index), exact=True)
        prefix = task_prefix(dag_id, run_id)
        tis = self.backend.groups(prefix, self.now, whole=True)
        wanted = SEP + str(map_index)
        return self._sum(self._count(prefix + ti, exact=True) for ti in tis if ti.endswith(wanted))

    @staticmethod
    def _sum(counts: Iterable[int]) -> int:
        total = 0
        for n in counts:
            total += n
            if total > KEY_COUNT_CAP:
                break
        return min(total, KEY_COUNT_CAP + 1)

    def _counted(
        self,
        fetch: Callable[[int], list[str]],
        keep: Callable[[str], bool],
        count: Callable[[list[str]], list[int]],
        visible: Callable[[str], int],
        reach: Reach,
        limit: int,
        offset: int,
    ) -> Page[tuple[str, int]]:
        """A page of the items `fetch` finds and `keep` accepts, with their key counts: the
        page's only, all in one backend call (`count`). Items are found
        only as far as the page needs (`_first`): the total is exact when they end on the page,
        else `offset + limit + 1` and not exact. With pins, each item counts only what the
        caller may read (`visible`), and items where that is nothing are left out, so every
        item is found and counted."""
        if reach.pinned:
            items = [item for item in fetch(-1) if keep(item)]
            counted = [(item, n) for item in items if (n := visible(item))]
            return Page(counted[offset : offset + limit] if limit > 0 else [], len(counted))
        items, complete = _first(fetch, keep, limit, offset)
        window = _window(items, limit, offset)
        counts = count(window) if window else []
        return Page(list(zip(window, counts, strict=True)), len(items), complete)

    def _ranges(self, prefix: Callable[[str], str]) -> Callable[[list[str]], list[int]]:
        """Key counts of items: each a range count of the namespaces under `prefix(item)`."""
        return lambda items: self.backend.counts(
            [prefix(item) for item in items], self.now, cap=KEY_COUNT_CAP + 1
        )

    def dags(
        self,
        *,
        reach: Reach = EVERYTHING,
        may_task: MayTask = _allow_all_tasks,
        limit: int = 50,
        offset: int = 0,
        pattern: str = "",
    ) -> Page[tuple[str, int]]:
        """DAG ids holding live task state the caller may read, with their key counts; only
        those `pattern` finds (`id_search`), when given."""
        globs = [("", "")] if reach.dag_globs is None else map(glob_to_like, reach.dag_globs)
        ranges = list(globs)

        listed: dict[str, int] = {}  # DAGs and counts a catalog listed (`live_dags`)

        def fetch(n: int) -> list[str]:
            if reach.dag_globs is None:
                from_catalog = self.backend.live_dags(self.now, n, cap=KEY_COUNT_CAP + 1)
                if from_catalog is not None:
                    listed.update(from_catalog)
                    return [dag for dag, _ in from_catalog]
            # The first n of the union are among the first n of each glob's (sorted) DAGs.
            found: set[str] = set()
            for start, like in ranges:
                found.update(self.backend.groups(TASKS, self.now, start=start, like=like, limit=n))
            return sorted(found)[: None if n < 0 else n]

        def catalog_counts(dags: list[str]) -> list[int]:
            if all(dag in listed for dag in dags):
                return [listed[dag] for dag in dags]
            return self.backend.dag_counts(dags, self.now, cap=KEY_COUNT_CAP + 1)

        run, task, index = reach.run_id, reach.task_id, reach.map_index
        found = id_search(pattern) if pattern else _found_all
        # Every DAG: the backend's count catalog. A token's globs: range counts of its DAGs'
        # rows alone (the catalog's read subtracts expired rows found store-wide).
        count = catalog_counts if reach.dag_globs is None else self._ranges(task_prefix)
        return self._counted(
            fetch,
            lambda dag: found(dag) and may_task(dag, run or "", task or "", index),
            count,
            lambda dag: self._visible(dag, run, task, index),
            reach,
            limit,
            offset,
        )

    def runs(
        self,
        dag_id: str,
        *,
        reach: Reach = EVERYTHING,
        may_task: MayTask = _allow_all_tasks,
        limit: int = 50,
        offset: int = 0,
    ) -> Page[tuple[str, int]]:
        """Run ids of one DAG holding live state the caller may read, with their key counts."""
        task, index = reach.task_id, reach.map_index
        pinned = reach.run_id

        def fetch(n: int) -> list[str]:
            if pinned is not None:
                return [pinned]
            return self.backend.groups(task_prefix(dag_id), self.now, limit=n)

        return self._counted(
            fetch,
            lambda run: may_task(dag_id, run, task or "", index),
            self._ranges(lambda run: task_prefix(dag_id, run)),
            lambda run: self._visible(dag_id, run, task, index),
            reach,
            limit,
            offset,
        )

    def task_instances(
        self,
        dag_id: str,
        run_id: str,
        *,
        reach: Reach = EVERYTHING,
        may_task: MayTask = _allow_all_tasks,
        limit: int = 50,
        offset: int = 0,
    ) -> Page[tuple[str, int, int]]:
        """(task_id, map_index, keys) of one run's task instances holding live state the caller
        may read, by task id then map index (as a number)."""
        prefix = task_prefix(dag_id, run_id)
        start = "" if reach.task_id is None else reach.task_id + SEP
        found = []
        for field in self.backend.groups(prefix, self.now, whole=True, start=start):
            task, _, index = field.rpartition(SEP)
            if may_task(dag_id, run_id, task, int(index)):
                found.append((task, int(index)))
        found.sort()
        window = found[offset : offset + limit] if limit > 0 else []
        namespaces = [f"{prefix}{task}{SEP}{index}" for task, index in window]
        counts = self.backend.counts(namespaces, self.now, exact=True, cap=KEY_COUNT_CAP + 1)
        items = [(task, index, n) for (task, index), n in zip(window, counts, strict=True)]
        return Page(items, len(found))

    def assets(
        self,
        *,
        may_asset: MayAsset = _allow_all_assets,
        limit: int = 50,
        offset: int = 0,
    ) -> Page[tuple[str, int]]:
        """Asset identities holding state the caller may read, with their key counts."""
        names, complete = _first(
            lambda n: self.backend.groups(ASSET_PREFIX, self.now, whole=True, limit=n),
            # parse_namespace, not AssetScope(...): a name written before today's rules lists.
            lambda name: may_asset(parse_namespace(ASSET_PREFIX + name)),  # type: ignore[arg-type]
            limit,
            offset,
        )
        window = _window(names, limit, offset)
        counts = self.backend.counts(
            [ASSET_PREFIX + n for n in window], self.now, exact=True, cap=KEY_COUNT_CAP + 1
        )
        return Page(list(zip(window, counts, strict=True)), len(names), complete)
