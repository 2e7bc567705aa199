"""The one door to MLflow: what the writer asks of a tracking server, in plain values.

``RunClient`` is the interface the writer, its run bookkeeping and its artifact logging
use; ``MlflowRunClient`` implements it on ``mlflow.MlflowClient`` and is the only class
in tunekit that imports MLflow (lazily). MLflow's exceptions come out as ``MlflowError``
with MLflow's error code, so callers sort errors without importing MLflow, and a fake
client in a unit test needs no MLflow at all. ``search_all_runs`` is the one loop that
pages through ``search_runs`` (the writer and ``tunekit.results.mlflow`` both use it).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib.util
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol

from tunekit.environment import sqlite_database

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Run

SEARCH_PAGE_SIZE = 1000
ARTIFACTS_FOLDER = "mlruns"  # a SQLite store's artifacts: this folder beside the database file
# MLflow's REST client looks for a Databricks runtime and for Spark around every request by
# importing their modules (MLflow 3.17: databricks_utils' REPL-context short cut and
# _get_active_spark_session), 8 imports per request. Where they are not installed each
# failed import searches sys.path again: a quarter of the client's CPU per trial against a
# local server (21 -> 15 ms per trial; the writer runs in the driver process).
PLATFORM_MODULES = ("dbruntime", "pyspark")


class MlflowError(Exception):
    """An error MLflow answered with; ``code`` is its error code (``RESOURCE_ALREADY_EXISTS``...)."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


class MetricPoint(NamedTuple):
    key: str
    value: float
    timestamp_ms: int
    step: int


@dataclass(frozen=True)
class ExperimentRef:
    experiment_id: str
    deleted: bool
    tags: Mapping[str, str]


@dataclass(frozen=True)
class RunRef:
    run_id: str
    status: str
    tags: Mapping[str, str]
    start_ms: int = 0


class RunClient(Protocol):
    """What tracking asks of MLflow. Called from the writer thread and its lanes
    (``batches.side_by_side``: several trials' runs at once, each run from one lane)."""

    def get_experiment(self, name: str) -> ExperimentRef | None: ...

    def create_experiment(self, name: str, tags: Mapping[str, str]) -> str: ...

    def set_experiment_tag(self, experiment_id: str, key: str, value: str) -> None: ...

    def search_runs(self, experiment_id: str, filter_string: str) -> Iterator[RunRef]: ...

    def create_run(self, experiment_id: str, *, start_ms: int, name: str, tags: Mapping[str, str]) -> str: ...

    def set_running(self, run_id: str) -> None: ...

    def metric_history(self, run_id: str, key: str) -> list[tuple[int, float]]: ...

    def log_batch(
        self,
        run_id: str,
        *,
        metrics: Sequence[MetricPoint] = (),
        params: Sequence[tuple[str, str]] = (),
        tags: Sequence[tuple[str, str]] = (),
    ) -> None: ...

    def set_terminated(self, run_id: str, status: str, end_ms: int | None = None) -> None: ...

    def set_tag(self, run_id: str, key: str, value: str) -> None: ...

    def delete_run(self, run_id: str) -> None: ...

    def log_artifact(self, run_id: str, path: str, artifact_path: str | None = None) -> None: ...

    def list_artifacts(self, run_id: str, path: str) -> list[str]: ...

    def create_registered_model(self, name: str) -> None: ...

    def has_model_version(self, name: str, run_id: str) -> bool: ...

    def artifact_uri(self, run_id: str) -> str: ...

    def create_model_version(self, name: str, source: str, run_id: str, description: str) -> None: ...


@contextlib.contextmanager
def _mlflow_errors() -> Iterator[None]:
    from mlflow.exceptions import MlflowException

    try:
        yield
    except MlflowException as error:
        raise MlflowError(str(error), str(error.error_code)) from error


@contextlib.contextmanager
def absent_platforms_skipped() -> Iterator[None]:
    """While it is open, importing a ``PLATFORM_MODULES`` module that is not installed fails at once.

    A name set to None in ``sys.modules`` makes its import raise ImportError without a search.
    Only modules neither imported nor installed are marked, and the marks go at the end, so a
    platform that is there is used as MLflow expects.
    """
    marked = [name for name in PLATFORM_MODULES if name not in sys.modules and importlib.util.find_spec(name) is None]
    for name in marked:
        sys.modules[name] = None  # type: ignore[assignment]  # Python's own "not importable" mark
    try:
        yield
    finally:
        for name in marked:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


def search_all_runs(client: MlflowClient, experiment_ids: list[str], filter_string: str) -> Iterator[Run]:
    """Every active run matching ``filter_string``, page by page (MLflow's ``Run`` objects)."""
    token = None
    while True:
        page = client.search_runs(experiment_ids, filter_string, max_results=SEARCH_PAGE_SIZE, page_token=token)
        yield from page
        token = page.token
        if not token:
            return


class MlflowRunClient:
    """``RunClient`` on a real ``MlflowClient`` (imports MLflow when built)."""

    def __init__(self, tracking_uri: str) -> None:
        from mlflow import MlflowClient

        database = sqlite_database(tracking_uri)
        if database is not None and not database.exists():
            new_sqlite_store(database)
        self._client = MlflowClient(tracking_uri=tracking_uri)
        # MLflow puts a SQLite store's artifacts in ./mlruns of whichever directory the
        # experiment was first created from; beside the database they stay with the runs.
        self._artifact_location = (database.parent / ARTIFACTS_FOLDER).as_uri() if database else None

    def get_experiment(self, name: str) -> ExperimentRef | None:
        with _mlflow_errors():
            found = self._client.get_experiment_by_name(name)
        if found is None:
            return None
        return ExperimentRef(found.experiment_id, found.lifecycle_stage == "deleted", dict(found.tags))

    def create_experiment(self, name: str, tags: Mapping[str, str]) -> str:
        with _mlflow_errors():
            return self._client.create_experiment(name, artifact_location=self._artifact_location, tags=dict(tags))

    def set_experiment_tag(self, experiment_id: str, key: str, value: str) -> None:
        with _mlflow_errors():
            self._client.set_experiment_tag(experiment_id, key, value)

    def search_runs(self, experiment_id: str, filter_string: str) -> Iterator[RunRef]:
        with _mlflow_errors():
            runs = list(search_all_runs(self._client, [experiment_id], filter_string))
        return iter(
            RunRef(run.info.run_id, run.info.status, dict(run.data.tags), int(run.info.start_time or 0)) for run in runs
        )

    def create_run(self, experiment_id: str, *, start_ms: int, name: str, tags: Mapping[str, str]) -> str:
        with _mlflow_errors():
            run = self._client.create_run(experiment_id, start_time=start_ms, run_name=name, tags=dict(tags))
        return str(run.info.run_id)

    def set_running(self, run_id: str) -> None:
        with _mlflow_errors():
            self._client.update_run(run_id, status="RUNNING")

    def metric_history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        with _mlflow_errors():
            return [(point.step, point.value) for point in self._client.get_metric_history(run_id, key)]

    def log_batch(
        self,
        run_id: str,
        *,
        metrics: Sequence[MetricPoint] = (),
        params: Sequence[tuple[str, str]] = (),
        tags: Sequence[tuple[str, str]] = (),
    ) -> None:
        from mlflow.entities import Metric, Param, RunTag

        with _mlflow_errors():
            self._client.log_batch(
                run_id,
                metrics=[Metric(m.key, m.value, m.timestamp_ms, m.step) for m in metrics],
                params=[Param(key, value) for key, value in params],
                tags=[RunTag(key, value) for key, value in tags],
            )

    def set_terminated(self, run_id: str, status: str, end_ms: int | None = None) -> None:
        with _mlflow_errors():
            self._client.set_terminated(run_id, status=status, end_time=end_ms)

    def set_tag(self, run_id: str, key: str, value: str) -> None:
        with _mlflow_errors():
            self._client.set_tag(run_id, key, value)

    def delete_run(self, run_id: str) -> None:
        with _mlflow_errors():
            self._client.delete_run(run_id)

    def log_artifact(self, run_id: str, path: str, artifact_path: str | None = None) -> None:
        with _mlflow_errors():
            self._client.log_artifact(run_id, path, artifact_path)

    def list_artifacts(self, run_id: str, path: str) -> list[str]:
        with _mlflow_errors():
            return [item.path for item in self._client.list_artifacts(run_id, path)]

    def create_registered_model(self, name: str) -> None:
        with _mlflow_errors():
            self._client.create_registered_model(name)

    def has_model_version(self, name: str, run_id: str) -> bool:
        with _mlflow_errors():
            return bool(self._client.search_model_versions(f"name = '{name}' and run_id = '{run_id}'"))

    def artifact_uri(self, run_id: str) -> str:
        with _mlflow_errors():
            return str(self._client.get_run(run_id).info.artifact_uri)

    def create_model_version(self, name: str, source: str, run_id: str, description: str) -> None:
        with _mlflow_errors():
            self._client.create_model_version(name, source, run_id=run_id, description=description)


def new_sqlite_store(database: Path) -> bool:
    """Makes a new SQLite store's schema quickly: in a scratch file beside it, SQLite's syncs off,
    then one fsync and a link to ``database`` (never over a file another process made meanwhile).

    MLflow makes a new store by running its schema migrations one by one (69 in MLflow 3.17),
    each a commit that SQLite syncs to disk: 2.7-9 s on a busy 2-core machine, against 0.7-1.2 s
    this way, with the same schema and the same Default experiment (MLflow's own code makes
    both; only the syncs differ). A crash meanwhile leaves no half-made store: the link is made
    only once the schema is whole. Returns whether it made the store; on any failure (another
    MLflow, workspaces, a read-only folder) it leaves the store to MLflow.
    """
    if os.environ.get("MLFLOW_ENABLE_WORKSPACES", "").lower() in ("1", "true") or not database.parent.is_dir():
        return False
    scratch = database.with_name(f".{database.name}.{os.getpid()}.new")
    # A process ending meanwhile (a signal during start-up) stops this thread where it is: the
    # scratch file goes at exit all the same, and the link, if still to come, then fails.
    cleanup = functools.partial(_remove, scratch)  # its own: unregistered alone
    atexit.register(cleanup)
    try:
        import sqlite3

        import sqlalchemy
        from mlflow.store.tracking import DEFAULT_LOCAL_FILE_AND_ARTIFACT_PATH
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        def unsynced(connection: object, _record: object) -> None:
            if not isinstance(connection, sqlite3.Connection):
                return  # another thread's engine on another database: not ours to touch
            cursor = connection.cursor()
            # Only the scratch file's connections: another engine in this process keeps its syncs.
            if any(Path(row[2]) == scratch for row in cursor.execute("PRAGMA database_list") if row[2]):
                cursor.execute("PRAGMA synchronous=OFF")
                cursor.execute("PRAGMA journal_mode=MEMORY")
            cursor.close()

        sqlalchemy.event.listen(sqlalchemy.engine.Engine, "connect", unsynced)
        try:
            # MLflow's default artifact root, as it resolves it for a store it makes from a URI.
            root = os.environ.get("_MLFLOW_SERVER_ARTIFACT_ROOT", DEFAULT_LOCAL_FILE_AND_ARTIFACT_PATH)
            SqlAlchemyStore(f"sqlite:///{scratch}", root).engine.dispose()
        finally:
            sqlalchemy.event.remove(sqlalchemy.engine.Engine, "connect", unsynced)
        descriptor = os.open(scratch, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        os.link(scratch, database)  # FileExistsError: another process made it first; theirs stays
        return True
    except Exception:  # any failure leaves the store to MLflow, as before
        return False
    finally:
        atexit.unregister(cleanup)
        cleanup()


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def default_tracking_uri() -> str:
    """MLflow's own default: ``MLFLOW_TRACKING_URI``, ``mlflow.set_tracking_uri``, else its local default."""
    import mlflow

    return str(mlflow.get_tracking_uri())
