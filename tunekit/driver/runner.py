"""``run`` and ``resume``: a search as a few named stages, each handing the next what it prepared.

    run:     prepare → join → folder → search → close
    resume:  folder → prepare → join → search → close

- prepare (``tunekit.driver.prepare``): the spec, the builders passed from Python, the Ray it
  runs on and the console, checked before anything starts: ``Prepared``. A resume prepares from
  the folder it opened (the spec is there; its records are checked whole first), and a complete
  search ends here, said, without Ray.
- join (``_join``): a cluster joined with a bound, and a trial checked to fit, before anything
  is written: ``JoinedCluster`` (None for a private local Ray, or the Ray already here).
- folder (``tunekit.driver.folders``): the experiment's folder, created (a run, after the
  join: nothing is written when it fails) or opened (a resume), and its lease held: ``Experiment``.
- search (``tunekit.driver.fit``): the Ray session, the Tuner (new or restored) and its ``fit``,
  then the verdict, raised as the search's error when it did not end well.
- close (``_closed``): the results, loaded from the folder, and the closing lines.

The driver never imports TensorFlow: trials configure their own devices in their worker
processes (see ``tunekit.worker.devices``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO

from tunekit.config.spec import ExperimentSpec
from tunekit.contract import Trainable, builders_from
from tunekit.driver.connect import CONNECT_TIMEOUT_S, JoinedCluster, check_fits, join, keep_ray_log
from tunekit.driver.fit import search
from tunekit.driver.folders import Experiment, discard_if_never_started, new_experiment, opened_experiment
from tunekit.driver.prepare import Prepared, prepare_resume, prepare_run, progress_stream
from tunekit.driver.resumable import remove_stand_ins, stand_in_for_rotated_checkpoints
from tunekit.driver.session import reuses_ray
from tunekit.driver.signals import StopSignals
from tunekit.layout import SPEC_FILE
from tunekit.results.load import ExperimentResults, load
from tunekit.search.forecast import attach_prediction
from tunekit.storage.store import write_text


def run(
    spec: str | Path | Mapping[str, Any] | ExperimentSpec,
    *,
    overrides: Sequence[str] = (),
    name: str | None = None,
    storage: str | Path | None = None,
    address: str | None = None,
    connect_timeout: float = CONNECT_TIMEOUT_S,
    progress: TextIO | bool | None = True,
    trainable: ModuleType | None = None,
    build_data: Callable[..., Any] | None = None,
    build_model: Callable[..., Any] | None = None,
    fit_options: Callable[..., Any] | None = None,
    **sections: Any,
) -> ExperimentResults:
    """Runs a search and returns its results.

    Args:
        spec: a spec file path, a parsed mapping, or a loaded ``ExperimentSpec``.
        overrides: ``key.path=value`` strings, as ``tunekit run --set``.
        name: the experiment directory's name (default: the spec's name and a timestamp).
        storage: where experiment directories live (default: the spec's ``storage.path``).
        address: a Ray cluster to join (default: ``RAY_ADDRESS``, else a private local Ray;
            ``auto``: the cluster ``ray start`` recorded on this machine).
        connect_timeout: seconds joining the cluster may take (a bounded probe, before anything
            is written).
        progress: a stream for live progress and the closing lines (the best, its config, the
            times: as `tunekit run` prints them), True for stdout, False for silence.
        trainable: the trainable as a module object (from a notebook); the spec's
            ``trainable`` is then ignored and may be omitted.
        build_data: ``build_data`` as a function, with ``build_model`` (and optionally
            ``fit_options``) instead of a module; functions travel to the workers by Ray's
            serialisation.
        build_model: ``build_model`` as a function (with ``build_data``).
        fit_options: ``fit_options`` as a function (optional).
        **sections: spec sections deep-merged over the spec, e.g. ``budget={"num_samples": 4}``.

    Raises:
        SpecError: the spec is invalid; nothing was written.
        SearchAborted: a trial error every trial would hit stopped the search.
        NoResultError: no trial reported the metric (all failed, or the time budget ended first).
        ClusterError: the cluster could not be joined (nothing listens, token, versions, time).
        ResourceError: no node of the cluster can ever give a trial its CPUs or GPUs.
        StorageError: the storage is not shared by every node of the cluster.
        SearchInterrupted: SIGINT or SIGTERM stopped the search; ``tunekit.resume`` continues it.

    Each error but SpecError and ClusterError carries ``experiment_dir``, whose results
    stay loadable; it is None when the search stopped before Ray Tune started it, whose
    directory is removed (nothing ran, nothing is left behind).
    """
    launched_at = time.time()  # the zero of a filed prediction's wall time
    builders = builders_from(trainable, build_data, build_model, fit_options)
    prepared = prepare_run(spec, overrides, sections, builders, address, progress)
    joined = _join(prepared, connect_timeout, None)  # a cluster first: nothing is written if it fails
    experiment = new_experiment(prepared.spec, name, storage)
    try:
        if joined is not None:
            keep_ray_log(experiment.directory, joined.ray_log)
        # A `tunekit plan --probe` of this spec under the same storage: its prediction goes with the experiment.
        no_prediction = attach_prediction(prepared.spec, experiment.directory, prepared.target.address, launched_at)
        if no_prediction and prepared.stream is not None:
            print(f"tunekit: {no_prediction}", file=prepared.stream, flush=True)
        search(prepared, experiment)
    except BaseException as error:
        experiment.lease.release()
        discard_if_never_started(experiment.directory, error)
        raise
    finally:
        experiment.lease.release()
    return _closed(experiment.directory, prepared.stream, builders)


def _closed(experiment_dir: Path, stream: TextIO | None, builders: Trainable | None) -> ExperimentResults:
    """The search's results, holding the builders passed from Python for their rebuilds; its closing
    lines written to the progress stream first."""
    from tunekit.results.closing import closing_text

    results = dataclasses.replace(load(experiment_dir), builders=builders)
    if stream is not None:
        stream.write(closing_text(results))
        stream.flush()
    return results


def _join(prepared: Prepared, timeout_s: float, experiment_dir: Path | None) -> JoinedCluster | None:
    """The join stage: ``prepared.target``'s cluster joined with a bound, and a trial checked to
    fit, before Ray starts here.

    A signal meanwhile ends the start-up (``StopSignals``): nothing was started, and a new
    search has nothing written yet.
    """
    if reuses_ray(prepared.target.address):
        return None  # the caller's Ray, or the one kept from an earlier run: checked in the session
    with StopSignals(experiment_dir):
        resuming = experiment_dir is not None
        address = prepared.target.address
        joined = None if address is None else join(address, timeout_s, resuming=resuming)
        check_fits(prepared.spec, joined)
    return joined


def resume(
    experiment_dir: str | Path,
    *,
    overrides: Sequence[str] = (),
    address: str | None = None,
    local: bool = False,
    connect_timeout: float = CONNECT_TIMEOUT_S,
    progress: TextIO | bool | None = True,
    trainable: ModuleType | None = None,
    build_data: Callable[..., Any] | None = None,
    build_model: Callable[..., Any] | None = None,
    fit_options: Callable[..., Any] | None = None,
) -> ExperimentResults:
    """Finishes an interrupted search from its directory, or grows a finished one.

    A search whose builders were passed from Python needs them passed again here. It runs
    where it ran: the cluster recorded in ``cluster.json`` is joined again.

    Args:
        address: another cluster to run on (the console says so).
        local: run on a private local Ray although the search ran on a cluster.
        overrides: ``key.path=value`` strings, as ``tunekit resume --set``: only
            ``budget.num_samples`` (at least the trials already run), ``budget.max_concurrent``
            and ``budget.time_budget_s`` may change. The study's history, ASHA's rungs and
            the MLflow runs carry on; spec.yaml records the new budget, and a new time
            budget counts from this resume.

    Raises:
        SpecError: an override changes anything else, or asks for fewer trials than ran.

    Other errors are ``run``'s; so are the trainable's arguments. ``experiment_dir`` may be a
    bucket experiment's URI (``s3://bucket/prefix/name``), resumed from any machine.
    """
    builders = builders_from(trainable, build_data, build_model, fit_options)
    stream = progress_stream(progress)
    with opened_experiment(experiment_dir, stream) as experiment:
        prepared = prepare_resume(experiment, overrides, address, local, builders, stream)
        if prepared is None:  # complete: said, and closed without Ray
            return _closed(experiment.directory, stream, builders)
        return _resume(prepared, experiment, connect_timeout)


def _resume(prepared: Prepared, experiment: Experiment, connect_timeout: float) -> ExperimentResults:
    """``resume``'s join, search and close, with the experiment's lease held."""
    directory = experiment.directory
    joined = _join(prepared, connect_timeout, directory)
    if joined is not None:
        keep_ray_log(directory, joined.ray_log)
    if prepared.grown:
        write_text(directory / SPEC_FILE, prepared.spec.to_yaml())
    stand_ins = stand_in_for_rotated_checkpoints(directory)
    try:
        search(prepared, experiment)
    finally:
        remove_stand_ins(directory, stand_ins)
    return _closed(directory, prepared.stream, prepared.builders)
