"""The Ray Tune function that runs one trial: devices → data → policy → model → epochs.

Runs inside Ray worker processes. Trials reuse workers (``reuse_actors``), so the cost of
importing TensorFlow and configuring devices is paid once per worker, and each trial
starts by resetting the Keras session, dtype policy and seeds so trials never leak into
each other.

Failures are sorted here, where the exception is seen:

* ``TrialFailure`` (non-finite loss) and any other exception from the trial's own code
  end the trial as failed with a condensed reason; the search goes on.
* ``FatalTrialError`` (builders returning the wrong things, a fit setting tunekit owns)
  and import errors mark the failure fatal: the driver stops the search at once instead
  of repeating the same traceback in every trial.
* A killed worker is not caught at all: Ray retries the trial from its last checkpoint.

Whatever the trial's code prints (stdout and stderr, Python and C++ alike) goes to the
trial's ``output.log``; a failure's full traceback to its ``error.txt``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunekit.contract import Builders, TrialContext, load_builders
from tunekit.errors import FatalTrialError, TrialFailure
from tunekit.layout import (
    CHECKPOINT_STATE,
    CHECKPOINT_WEIGHTS,
    EPOCH_KEY,
    ERROR_FILE,
    FAILURE_KEY,
    FAILURE_KIND_KEY,
    FINAL_MODEL,
    FINAL_WEIGHTS,
    OUTPUT_FILE,
)
from tunekit.resources import WorkerDevices, configure_worker, resolve_precision
from tunekit.spec import ExperimentSpec

_worker: WorkerDevices | None = None


def run_trial(config: dict[str, Any], spec: ExperimentSpec, experiment_dir: str) -> None:
    """Ray Tune entry point (bound to the spec with ``tune.with_parameters``)."""
    from ray import tune

    progress = TrialProgress()
    # The trial's folder in the experiment (shared storage on a cluster), not Ray's local
    # staging directory, which Ray never copies back.
    trial_dir = Path(experiment_dir) / tune.get_context().get_trial_id()
    with _output_to(trial_dir / OUTPUT_FILE):
        try:
            _train(dict(config), spec, progress)
        except FatalTrialError as error:
            _report_failure(tune, trial_dir, str(error), "fatal", progress.epoch, error)
        except (ImportError, SyntaxError) as error:
            _report_failure(tune, trial_dir, reason(error), "fatal", progress.epoch, error)
        except TrialFailure as error:
            _report_failure(tune, trial_dir, str(error), "trial", progress.epoch, error)
        except Exception as error:
            _report_failure(tune, trial_dir, reason(error), "trial", progress.epoch, error)
        finally:
            _release_trial_state()


@contextlib.contextmanager
def _output_to(path: Path) -> Iterator[None]:
    """Sends everything the trial writes to stdout and stderr into the trial's log.

    The file descriptors themselves are redirected, so TensorFlow's C++ messages land
    there too, not only Python's prints. Reused workers run one trial at a time, so the
    redirection never mixes two trials; every attempt appends under its own header.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    with path.open("ab", buffering=0) as log:
        log.write(f"--- tunekit: attempt started {time.strftime('%Y-%m-%d %H:%M:%S')} ---\n".encode())
        saved = os.dup(1), os.dup(2)
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


@dataclass
class TrialProgress:
    epoch: int = 0  # epochs completed, whether trained now or restored from a checkpoint


def _train(config: dict[str, Any], spec: ExperimentSpec, progress: TrialProgress) -> None:
    from ray import tune

    from tunekit.epoch_callback import EpochReporter

    devices = _worker_devices(spec)
    precision = resolve_precision(str(config.get("precision", spec.training.precision)), devices)
    # A grid point's repeats carry their own seed in the config; other trials share the spec's.
    seed = int(config.get("seed", spec.training.seed))
    _reset_trial_state(precision, seed)
    per_replica_batch = int(config.get("batch_size", spec.training.batch_size))
    if spec.training.scale_lr and devices.replicas > 1 and "learning_rate" in config:
        config["learning_rate"] = float(config["learning_rate"]) * devices.replicas
    context = tune.get_context()
    ctx = TrialContext(
        batch_size=per_replica_batch * devices.replicas,
        per_replica_batch_size=per_replica_batch,
        replicas=devices.replicas,
        precision=precision,
        seed=seed,
        workdir=context.get_trial_dir(),
        cpus=devices.cpus,
        max_epochs=spec.budget.max_epochs,
        jit_compile=bool(config.get("jit_compile", spec.training.jit_compile)),
        data=spec.data,
    )
    builders = load_builders(spec.trainable)
    train_ds, val_ds = _checked_data(builders.build_data(config, ctx))
    with devices.strategy.scope():
        model = _checked_model(builders.build_model(config, ctx))
        model = _ensure_float32_output(model, precision)
        if not model.compiled:
            _compile_from_config(model, config, ctx)
        model.jit_compile = ctx.jit_compile
    _check_model_takes_data(model, train_ds, "train")
    _check_model_takes_data(model, val_ds, "validation")
    options = _fit_options(builders, model, config, ctx)
    progress.epoch = _restore_checkpoint(tune.get_checkpoint(), model, train_ds)
    if progress.epoch >= spec.budget.max_epochs:
        return
    steps = options.get("steps_per_epoch") or _steps_per_epoch(train_ds)
    reporter = EpochReporter(spec, ctx, devices, progress, steps)
    model.fit(
        train_ds,
        validation_data=val_ds,
        epochs=spec.budget.max_epochs,
        initial_epoch=progress.epoch,
        verbose=0,
        # The datasets shuffle themselves; Keras would only warn that it ignores shuffle=True.
        **{"shuffle": False, **options, "callbacks": [*options.get("callbacks", []), reporter]},
    )


# Arguments of model.fit that tunekit sets itself, and why a trainable cannot.
OWNED_FIT_ARGUMENTS = {
    "x": "build_data returns the training set",
    "y": "build_data returns the training set",
    "validation_data": "build_data returns the validation set",
    "epochs": "budget.max_epochs sets it",
    "initial_epoch": "tunekit resumes from its checkpoints",
    "verbose": "tunekit reports every epoch itself",
    "batch_size": "batch the datasets with ctx.batch_size instead",
    "validation_split": "build_data returns the validation set",
}


def _fit_options(builders: Builders, model: Any, config: dict[str, Any], ctx: TrialContext) -> dict[str, Any]:
    """The trainable's further ``model.fit`` arguments: callbacks, class weights, steps."""
    if builders.fit_options is None:
        return {}
    import inspect

    import keras

    options = builders.fit_options(config, ctx)
    if not isinstance(options, dict):
        raise FatalTrialError(f"fit_options must return a dict of model.fit arguments; it returned {_kind(options)}")
    accepted = set(inspect.signature(model.fit).parameters)
    for key in options:
        if key in OWNED_FIT_ARGUMENTS:
            raise FatalTrialError(f"fit_options returned {key!r}, which tunekit sets ({OWNED_FIT_ARGUMENTS[key]})")
        if key not in accepted:
            raise FatalTrialError(
                f"fit_options returned {key!r}, which model.fit does not take; it takes "
                + ", ".join(sorted(accepted - set(OWNED_FIT_ARGUMENTS) - {"kwargs"}))
            )
    callbacks = options.get("callbacks") or []
    if not isinstance(callbacks, list | tuple) or not all(isinstance(c, keras.callbacks.Callback) for c in callbacks):
        raise FatalTrialError(
            f"fit_options' callbacks must be a list of keras.callbacks.Callback; got {_kind(callbacks)}"
        )
    return {**options, "callbacks": list(callbacks)}


def _checked_data(data: Any) -> tuple[Any, Any]:
    """Two batched ``tf.data.Dataset``s, or a fatal error naming what came back instead."""
    import tensorflow as tf

    expected = "build_data must return (train_ds, val_ds), two tf.data.Datasets batched with ctx.batch_size"
    if not isinstance(data, tuple | list) or len(data) != 2:
        raise FatalTrialError(f"{expected}; it returned {_kind(data)}")
    for name, dataset in zip(("train", "validation"), data, strict=True):
        if not isinstance(dataset, tf.data.Dataset):
            raise FatalTrialError(
                f"{expected}; its {name} set is {_kind(dataset)} (wrap arrays: "
                "tf.data.Dataset.from_tensor_slices((x, y)).batch(ctx.batch_size))"
            )
        element = dataset.element_spec
        if not isinstance(element, tuple) or len(element) not in (2, 3):
            raise FatalTrialError(
                f"{expected}; its {name} set yields {_spec_text(element)}, "
                "not (inputs, targets) or (inputs, targets, sample_weights)"
            )
        for part in tf.nest.flatten(element[1]):
            if part.shape.rank == 0:
                raise FatalTrialError(
                    f"{expected}; its {name} set is not batched: its elements have shapes "
                    f"{_spec_text(element)}, with scalar targets; add .batch(ctx.batch_size)"
                )
    return data[0], data[1]


def _checked_model(model: Any) -> Any:
    import keras

    if not isinstance(model, keras.Model):
        raise FatalTrialError(f"build_model must return a keras.Model; it returned {_kind(model)}")
    return model


def _check_model_takes_data(model: Any, dataset: Any, name: str) -> None:
    """A functional model's inputs against the dataset's: catches unbatched and mis-shaped sets."""
    import tensorflow as tf

    inputs = getattr(model, "inputs", None)
    if not inputs:
        return  # a subclassed model declares no inputs before its first call
    given = tf.nest.flatten(dataset.element_spec[0])
    if len(given) != len(inputs):
        raise FatalTrialError(
            f"build_data's {name} set gives {len(given)} input(s) but the model takes {len(inputs)} "
            f"({_spec_text(dataset.element_spec[0])} against {_shapes(inputs)})"
        )
    for spec, model_input in zip(given, inputs, strict=True):
        want = len(model_input.shape)
        if spec.shape.rank == want - 1:
            raise FatalTrialError(
                f"build_data's {name} set is not batched: its inputs have shape {_shape(spec.shape)} but the "
                f"model takes {_shape(model_input.shape)}; add .batch(ctx.batch_size)"
            )
        if spec.shape.rank != want:
            raise FatalTrialError(
                f"build_data's {name} set gives inputs of shape {_shape(spec.shape)} but the model takes "
                f"{_shape(model_input.shape)}"
            )


def _kind(value: Any) -> str:
    if isinstance(value, tuple | list):
        inner = ", ".join(_kind(v) for v in value[:4])
        return f"a {type(value).__name__} of {len(value)} ({inner})"
    if value is None:
        return "None"
    return f"{type(value).__module__.split('.')[0]}.{type(value).__qualname__}"


def _spec_text(element: Any) -> str:
    import tensorflow as tf

    return str(tf.nest.map_structure(lambda s: _shape(s.shape), element)).replace("'", "")


def _shapes(tensors: Any) -> str:
    return ", ".join(_shape(t.shape) for t in tensors)


def _shape(shape: Any) -> str:
    dims = ["None" if d is None else str(d) for d in (list(shape) if shape is not None else [])]
    return f"({dims[0]},)" if len(dims) == 1 else f"({', '.join(dims)})"


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


def save_checkpoint(directory: Path, model: Any, epoch: int) -> None:
    """Weights and optimizer state (the optimizer's learning rate included) at an epoch's end."""
    import numpy as np

    optimizer = model.optimizer
    arrays = {f"w{i}": v.numpy() for i, v in enumerate(model.weights)}
    arrays.update({f"o{i}": v.numpy() for i, v in enumerate(optimizer.variables)})
    np.savez(directory / CHECKPOINT_WEIGHTS, **arrays)
    (directory / CHECKPOINT_STATE).write_text(json.dumps({"epoch": epoch}))


def export_model(directory: Path, model: Any) -> str:
    """Saves the trained model; returns "" or, when only the weights could be saved, why.

    Keras cannot save a subclassed model or a custom layer without ``get_config`` whole;
    its weights always save, and ``build_model`` plus ``load_weights`` bring it back. A
    trained trial never fails over its export.
    """
    try:
        model.save(directory / FINAL_MODEL)
        return ""
    except Exception as error:
        (directory / FINAL_MODEL).unlink(missing_ok=True)
        why = reason(error, limit=200)
    try:
        model.save_weights(directory / FINAL_WEIGHTS)
    except Exception as error:
        (directory / FINAL_WEIGHTS).unlink(missing_ok=True)
        return f"nothing saved: {FINAL_MODEL} failed ({why}) and so did {FINAL_WEIGHTS} ({reason(error, limit=200)})"
    return f"saved weights only ({FINAL_WEIGHTS}): {FINAL_MODEL} failed ({why})"


def _restore_checkpoint(checkpoint: Any, model: Any, train_ds: Any) -> int:
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
            if not model.weights:
                # A subclassed model creates its weights on its first call.
                model(next(iter(train_ds))[0], training=False)
            saved = sum(1 for name in arrays.files if name.startswith("w"))
            if saved != len(model.weights):
                raise FatalTrialError(
                    f"the checkpoint in {directory} holds {saved} weights but build_model's model has "
                    f"{len(model.weights)}: the model changed since the checkpoint was written"
                )
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


def reason(error: BaseException, limit: int = 500) -> str:
    """The exception's type and message on one line, condensed but whole where it fits.

    Keras's messages run over several lines and open with a line that says little
    ("Exception encountered when calling ..."), so lines are joined, not cut to the first.
    """
    text = re.sub(r"\s+", " ", str(error)).strip()
    line = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _report_failure(tune: Any, trial_dir: Path, why: str, kind: str, epoch: int, error: BaseException) -> None:
    trial_dir.mkdir(parents=True, exist_ok=True)
    (trial_dir / ERROR_FILE).write_text("".join(traceback.format_exception(error)))
    traceback.print_exception(error)  # into output.log too, where the trial's prints are
    tune.report({EPOCH_KEY: epoch, FAILURE_KEY: why, FAILURE_KIND_KEY: kind})
