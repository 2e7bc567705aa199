"""The Ray Tune function that runs one trial: devices → data → policy → model → epochs.

Runs inside Ray worker processes. Trials reuse workers (``reuse_actors``), so the cost of
importing TensorFlow and configuring devices is paid once per worker, and each trial
starts by resetting the Keras session, dtype policy and seeds so trials never leak into
each other.

Failures are sorted here, where the exception is seen:

* ``TrialFailure`` (non-finite loss) and any other exception from the trial's own code
  end the trial as failed with a one-line reason; the search goes on.
* ``FatalTrialError`` and import errors mark the failure fatal: the driver stops the
  search at once instead of repeating the same traceback in every trial.
* A killed worker is not caught at all: Ray retries the trial from its last checkpoint.
"""

from __future__ import annotations

import json
import os
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunekit.contract import TrialContext, load_trainable
from tunekit.errors import FatalTrialError, TrialFailure
from tunekit.layout import CHECKPOINT_STATE, CHECKPOINT_WEIGHTS, EPOCH_KEY, FAILURE_KEY, FAILURE_KIND_KEY, FINAL_MODEL
from tunekit.resources import WorkerDevices, configure_worker, resolve_precision
from tunekit.spec import ExperimentSpec

_worker: WorkerDevices | None = None


def run_trial(config: dict[str, Any], spec: ExperimentSpec) -> None:
    """Ray Tune entry point (bound to the spec with ``tune.with_parameters``)."""
    from ray import tune

    progress = TrialProgress()
    try:
        _train(dict(config), spec, progress)
    except (FatalTrialError, ImportError, SyntaxError) as error:
        _report_failure(tune, _reason(error), "fatal", progress.epoch, error)
    except TrialFailure as error:
        _report_failure(tune, str(error), "trial", progress.epoch, error)
    except Exception as error:
        _report_failure(tune, _reason(error), "trial", progress.epoch, error)
    finally:
        _release_trial_state()


@dataclass
class TrialProgress:
    epoch: int = 0  # epochs completed, whether trained now or restored from a checkpoint


def _train(config: dict[str, Any], spec: ExperimentSpec, progress: TrialProgress) -> None:
    from ray import tune

    from tunekit.epoch_callback import EpochReporter

    devices = _worker_devices(spec)
    precision = resolve_precision(str(config.get("precision", spec.training.precision)), devices)
    _reset_trial_state(precision, spec.training.seed)
    per_replica_batch = int(config.get("batch_size", spec.training.batch_size))
    if spec.training.scale_lr and devices.replicas > 1 and "learning_rate" in config:
        config["learning_rate"] = float(config["learning_rate"]) * devices.replicas
    context = tune.get_context()
    ctx = TrialContext(
        batch_size=per_replica_batch * devices.replicas,
        per_replica_batch_size=per_replica_batch,
        replicas=devices.replicas,
        precision=precision,
        seed=spec.training.seed,
        workdir=context.get_trial_dir(),
        cpus=devices.cpus,
        max_epochs=spec.budget.max_epochs,
        jit_compile=bool(config.get("jit_compile", spec.training.jit_compile)),
        data=spec.data,
    )
    module = load_trainable(spec.trainable)
    train_ds, val_ds = module.build_data(config, ctx)
    with devices.strategy.scope():
        model = module.build_model(config, ctx)
        model = _ensure_float32_output(model, precision)
        if not model.compiled:
            _compile_from_config(model, config, ctx)
        model.jit_compile = ctx.jit_compile
    progress.epoch = _restore_checkpoint(tune.get_checkpoint(), model)
    if progress.epoch >= spec.budget.max_epochs:
        return
    reporter = EpochReporter(spec, ctx, devices, progress, _steps_per_epoch(train_ds))
    model.fit(
        train_ds,
        validation_data=val_ds,
        epochs=spec.budget.max_epochs,
        initial_epoch=progress.epoch,
        callbacks=[reporter],
        verbose=0,
    )


def _worker_devices(spec: ExperimentSpec) -> WorkerDevices:
    global _worker
    if _worker is None:
        import ray

        os.environ.pop("MLFLOW_RUN_ID", None)  # a stray run id would hijack runs (mlflow#12639)
        _worker = configure_worker(spec.resources, [str(i) for i in ray.get_gpu_ids()])
        _freeze_imported_objects()
    return _worker


def _freeze_imported_objects() -> None:
    """Moves what the imports created out of the garbage collector's sight.

    TensorFlow and Keras leave ~420,000 tracked objects that live as long as the worker;
    every trial's ``clear_session`` runs a full collection that walks them all (0.2-0.3 s
    per trial on 2 cores). Frozen, they are skipped: the collection takes ~0.01 s and
    still frees everything a trial created.
    """
    import gc

    gc.collect()  # garbage at this point would otherwise be frozen with the rest
    gc.freeze()


def _reset_trial_state(precision: str, seed: int) -> None:
    import keras

    _drop_custom_gradients()
    keras.backend.clear_session(free_memory=True)  # drops the previous trial's model and graphs
    keras.mixed_precision.set_global_policy(precision)
    keras.utils.set_random_seed(seed)


def _drop_custom_gradients() -> None:
    """Unpins the previous trial's traced graphs (~7 MB a trial for the digits MLP).

    Tracing a ``tf.custom_gradient`` op (Keras's losses and optimizers have some) registers
    a ``CustomGradient-<uid>`` function in TensorFlow's global gradient registry, and never
    removes it; its closure holds the whole FuncGraph of the trial that traced it
    (tensorflow#97697, tensorflow#80895). Only a trace looks entries up, and every trace
    registers fresh ones, so once a trial is over its entries are dead weight.
    """
    from tensorflow.python.framework import ops

    registry = getattr(getattr(ops, "_gradient_registry", None), "_registry", None)
    if not isinstance(registry, dict):
        return  # a TensorFlow without the private registry: nothing known to leak
    for name in [name for name in registry if name.startswith("CustomGradient-")]:
        del registry[name]


def _release_trial_state() -> None:
    # The next trial's clear_session frees this one's graphs and runs the garbage
    # collector; doing it here too would only repeat it.
    import keras

    keras.mixed_precision.set_global_policy("float32")


def _ensure_float32_output(model: Any, precision: str) -> Any:
    """Under mixed precision the model's outputs must be float32 for a stable loss."""
    if precision == "float32":
        return model
    outputs = model.outputs if getattr(model, "outputs", None) else []
    if all(str(getattr(o, "dtype", "float32")) == "float32" for o in outputs):
        return model
    if model.compiled:
        raise FatalTrialError(
            f"build_model returned a compiled model whose output is {outputs[0].dtype} under {precision}; "
            "end it with a float32 layer, e.g. keras.layers.Activation('softmax', dtype='float32')"
        )
    import keras

    cast = [
        keras.layers.Activation("linear", dtype="float32", name=f"float32_output_{i}")(o) for i, o in enumerate(outputs)
    ]
    return keras.Model(model.inputs, cast[0] if len(cast) == 1 else cast, name=model.name)


def _compile_from_config(model: Any, config: dict[str, Any], ctx: TrialContext) -> None:
    import keras

    optimizer = keras.optimizers.get(
        {
            "class_name": str(config.get("optimizer", "adam")),
            "config": {"learning_rate": float(config.get("learning_rate", 1e-3))},
        }
    )
    model.compile(
        optimizer=optimizer,
        loss=config.get("loss", "sparse_categorical_crossentropy"),
        metrics=["accuracy"],
        jit_compile=ctx.jit_compile,
    )


def _steps_per_epoch(dataset: Any) -> int | None:
    import tensorflow as tf

    steps = int(tf.data.experimental.cardinality(dataset))
    return steps if steps > 0 else None


def save_checkpoint(directory: Path, model: Any, epoch: int, final: bool) -> None:
    import numpy as np

    optimizer = model.optimizer
    arrays = {f"w{i}": v.numpy() for i, v in enumerate(model.weights)}
    arrays.update({f"o{i}": v.numpy() for i, v in enumerate(optimizer.variables)})
    np.savez(directory / CHECKPOINT_WEIGHTS, **arrays)
    (directory / CHECKPOINT_STATE).write_text(json.dumps({"epoch": epoch}))
    if final:
        model.save(directory / FINAL_MODEL)


def _restore_checkpoint(checkpoint: Any, model: Any) -> int:
    """Loads weights and optimizer state; returns the number of epochs already trained."""
    if checkpoint is None:
        return 0
    import numpy as np

    with checkpoint.as_directory() as directory:
        if not (Path(directory) / CHECKPOINT_STATE).is_file():
            # Ray's record of this trial predates the driver's death and points at a
            # checkpoint already rotated away; training again from scratch is correct.
            return 0
        state = json.loads((Path(directory) / CHECKPOINT_STATE).read_text())
        with np.load(Path(directory) / CHECKPOINT_WEIGHTS) as arrays:
            for i, variable in enumerate(model.weights):
                variable.assign(arrays[f"w{i}"])
            model.optimizer.build(model.trainable_variables)
            for i, variable in enumerate(model.optimizer.variables):
                variable.assign(arrays[f"o{i}"])
    return int(state["epoch"])


def memory_mb(devices: WorkerDevices) -> float:
    if devices.on_gpu:
        import tensorflow as tf

        return tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def trial_info(ctx: TrialContext, devices: WorkerDevices) -> dict[str, Any]:
    import ray
    import tensorflow as tf

    build = tf.sysconfig.get_build_info()
    return {
        "cuda_version": str(build.get("cuda_version", "none")),
        "cudnn_version": str(build.get("cudnn_version", "none")),
        "node_id": ray.get_runtime_context().get_node_id(),
        "precision": ctx.precision,
        "replicas": ctx.replicas,
        "batch_size": ctx.batch_size,
        "device_names": list(devices.device_names),
        "ray_gpu_ids": list(devices.ray_gpu_ids),
        "jit_compile": ctx.jit_compile,
    }


def _reason(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    first = text[0] if text else ""
    reason = f"{type(error).__name__}: {first}" if first else type(error).__name__
    return reason[:300]


def _report_failure(tune: Any, reason: str, kind: str, epoch: int, error: BaseException) -> None:
    trial_dir = Path(tune.get_context().get_trial_dir())
    trial_dir.mkdir(parents=True, exist_ok=True)
    (trial_dir / "error.txt").write_text("".join(traceback.format_exception(error)))
    tune.report({EPOCH_KEY: epoch, FAILURE_KEY: reason, FAILURE_KIND_KEY: kind})
