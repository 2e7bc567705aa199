"""``training.executions``: one configuration fitted N times with different seeds, in lockstep.

KerasTuner's ``executions_per_trial`` fits a configuration N times one after the other and
scores it by the mean. Under ASHA the mean must exist at every epoch, so here the N models
train side by side: ``Executions`` is one Keras model whose training step runs each
execution's own ``train_step`` on the same batch (each its own optimizer), and whose logs
are the executions' mean, with ``<name>_std`` the spread (population standard deviation)
beside each. The epoch's report, ASHA's decision, the study's values and trials.csv are
therefore the mean. Execution i is built with the seed ``training.seed + i`` (execution 0
with the trial's own, as with one execution).

What the rest of the trial sees: the weights are all executions' (checkpoints, EarlyStopping's
``restore_best_weights``), the optimizer is ``JointOptimizer`` (their state in turn in a
checkpoint; a learning rate set on it, by ReduceLROnPlateau or a PBT mutation, is set on
every execution's), and the model exported, measured and loaded by ``get_best_models`` is
execution 0's (``first_execution``). Throughput counts the lockstep's steps: N models' work.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras

from tunekit.compat.tf_keras import build_training_state


class JointOptimizer:
    """The executions' optimizers as one, for what reads or sets ``model.optimizer``: a
    checkpoint's variables (every execution's, in turn), its restore's ``build``, and one
    learning rate set on every execution's."""

    built = True

    def __init__(self, models: Sequence[Any]) -> None:
        self._models = list(models)

    @property
    def variables(self) -> list[Any]:
        return [variable for model in self._models for variable in model.optimizer.variables]

    def build(self, variables: Any = None) -> None:
        for model in self._models:
            model.optimizer.build(model.trainable_variables)

    @property
    def iterations(self) -> Any:
        return self._models[0].optimizer.iterations

    @property
    def learning_rate(self) -> Any:
        return self._models[0].optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, value: Any) -> None:
        for model in self._models:
            model.optimizer.learning_rate = value


class Executions(keras.Model):
    """N compiled models of one configuration, trained and validated in lockstep (the module's docstring)."""

    def __init__(self, models: Sequence[Any]) -> None:
        super().__init__(name="executions")
        self.executions = list(models)
        self.compile(optimizer=None)
        self.optimizer = JointOptimizer(self.executions)
        self.jit_compile = self.executions[0].jit_compile
        self.built = True  # every execution is built already

    def call(self, inputs: Any, training: bool = False) -> Any:
        return self.executions[0](inputs, training=training)

    def train_step(self, data: Any) -> dict[str, Any]:
        return _mean_and_spread([model.train_step(data) for model in self.executions])

    def test_step(self, data: Any) -> dict[str, Any]:
        return _mean_and_spread([model.test_step(data) for model in self.executions])

    def reset_metrics(self) -> None:
        # Keras resets only this model's own metrics; each execution keeps its running means.
        for model in self.executions:
            model.reset_metrics()


def _mean_and_spread(logs: list[dict[str, Any]]) -> dict[str, Any]:
    from keras import ops

    joined: dict[str, Any] = {}
    for key in logs[0]:
        values = ops.stack([ops.cast(log[key], "float32") for log in logs])
        joined[key] = ops.mean(values)
        joined[f"{key}_std"] = ops.std(values)
    return joined


def in_lockstep(first: Any, count: int, seed: int, build: Callable[[], Any], batch_spec: Any) -> Any:
    """``first`` and ``count - 1`` more models that ``build`` makes, execution i seeded ``seed + i``,
    as one ``Executions`` model. Call it where ``first`` was built (under the trial's strategy)."""
    models = [first]
    for index in range(1, count):
        keras.utils.set_random_seed(seed + index)  # its initial weights and its dropout masks
        model = build()
        build_training_state(model, batch_spec)
        models.append(model)
    keras.utils.set_random_seed(seed)
    return Executions(models)


def first_execution(model: Any) -> Any:
    """The model a trial exports and measures: execution 0's under ``training.executions``."""
    return model.executions[0] if isinstance(model, Executions) else model
