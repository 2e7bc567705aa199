"""Every reach into a private Ray, Optuna or TensorFlow API, one small function each.

This module is the whole upgrade surface: when Ray, Optuna or TensorFlow changes, check
these functions against the new version and nothing else. Each says why tunekit needs
the private part and the version it was checked against. Importing this module is
cheap: every function imports its library itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna
    from ray.tune import RunConfig, Tuner
    from ray.tune.schedulers import ASHAScheduler


# ------------------------------------------------------------------------------ Ray


def restored_run_config(tuner: Tuner) -> RunConfig:
    """The run config of a tuner made by ``Tuner.restore``, with the callbacks Ray unpickled.

    Why: the recorder is restored from Ray's pickle with its tables; tunekit must find that
    instance to attach the per-process listeners (console, tracker) again, and the public
    ``Tuner`` does not expose its run config. Checked against Ray 2.60.

    Raises:
        RuntimeError: the tuner runs through Ray Client (no local tuner), which tunekit
            never does.
    """
    local = tuner._local_tuner
    if local is None:
        raise RuntimeError("a Tuner restored through Ray Client has no local run config; tunekit needs a local Tuner")
    return local.get_run_config()


def asha_rungs(scheduler: ASHAScheduler) -> list[tuple[float, dict[str, float]]]:
    """Every (milestone, {trial id: signed metric}) rung of every bracket of an ASHA scheduler.

    Why: Ray does not save scheduler state with an experiment; to resume a search, tunekit
    refills the rungs from the recorded epochs (``RecordingASHA.replay``) so a restored
    ASHA does not promote every trial. The dictionaries returned are ASHA's own: writing
    to them fills the rungs. Checked against Ray 2.60 (``_brackets``, ``_Bracket._rungs``).
    """
    return [(milestone, recorded) for bracket in scheduler._brackets for milestone, recorded in bracket._rungs]


def asha_metric_sign(scheduler: ASHAScheduler) -> float:
    """+1 when ASHA maximises its metric, -1 when it minimises: how it stores rung values.

    Why: replayed rung values must be signed as ASHA signs the ones it records itself.
    Checked against Ray 2.60 (``_metric_op``, None before the metric is set).
    """
    return float(scheduler._metric_op or 1.0)


def asha_max_t(scheduler: ASHAScheduler) -> float:
    """The epoch at which ASHA lets a trial finish (its ``max_t``).

    Why: a STOP decision before ``max_t`` is a pruning, one at ``max_t`` is the trial's
    end; Ray keeps ``max_t`` private. Checked against Ray 2.60 (``_max_t``).
    """
    return float(scheduler._max_t)


# --------------------------------------------------------------------------- Optuna


def reopen_trial(study: optuna.Study, frozen: optuna.trial.FrozenTrial) -> optuna.Trial:
    """A live ``optuna.Trial`` for a RUNNING trial of the study, as ``study.ask`` made it.

    Why: after a resume (or a restarted worker) the searcher must report further epochs of
    a trial asked in an earlier process; Optuna only constructs ``Trial`` objects in
    ``ask`` and identifies them by the storage's private ``_trial_id``. Checked against
    Optuna 5.0.
    """
    import optuna

    return optuna.Trial(study, frozen._trial_id)


# ----------------------------------------------------------------------- TensorFlow


def drop_custom_gradients() -> int:
    """Removes the ``CustomGradient-<uid>`` entries of TensorFlow's global gradient registry.

    Why: tracing a ``tf.custom_gradient`` op (Keras's losses and optimizers have some)
    registers a function there that is never removed; its closure holds the whole
    FuncGraph of the trial that traced it (tensorflow#97697, tensorflow#80895), ~7 MB a
    trial for the digits MLP. Only a trace looks entries up, and every trace registers
    fresh ones, so once a trial is over they are dead weight. A TensorFlow without the
    private registry is left alone. Checked against TensorFlow 2.21
    (``ops._gradient_registry._registry``).

    Returns:
        How many entries were removed.
    """
    from tensorflow.python.framework import ops

    registry: Any = getattr(getattr(ops, "_gradient_registry", None), "_registry", None)
    if not isinstance(registry, dict):
        return 0
    names = [name for name in registry if isinstance(name, str) and name.startswith("CustomGradient-")]
    for name in names:
        del registry[name]
    return len(names)
