"""A Keras project as its author wrote it: a subclassed model with a custom train_step and
no get_config (Keras cannot save it whole), callbacks and class weights passed to fit."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf
from helpers import digits_split


class TinyNet(keras.Model):
    def __init__(self, units: int) -> None:
        super().__init__()
        self.hidden = keras.layers.Dense(units, activation="relu")
        self.head = keras.layers.Dense(10, activation="softmax")

    def call(self, x: Any, training: bool = False) -> Any:
        return self.head(self.hidden(x))

    def train_step(self, data: Any) -> dict[str, Any]:
        x, y = data[0], data[1]
        sample_weight = data[2] if len(data) == 3 else None
        with tf.GradientTape() as tape:
            predicted = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=predicted, sample_weight=sample_weight)
        gradients = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(gradients, self.trainable_variables, strict=True))
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, predicted)
        return {m.name: m.result() for m in self.metrics}


def build_data(config: dict[str, Any], ctx: Any) -> tuple[tf.data.Dataset, tf.data.Dataset]:
    print(f"building data for units={config['units']}")
    (x_train, y_train), (x_val, y_val) = digits_split(ctx.seed)
    train = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(1400, seed=ctx.seed)
    val = tf.data.Dataset.from_tensor_slices((x_val, y_val))
    return train.batch(ctx.batch_size), val.batch(ctx.batch_size)


def build_model(config: dict[str, Any], ctx: Any) -> keras.Model:
    print(f"building the model of trial {ctx.trial_number}")
    model = TinyNet(config["units"])
    model.compile(
        optimizer=keras.optimizers.Adam(config["learning_rate"]),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model


def fit_options(config: dict[str, Any], ctx: Any) -> dict[str, Any]:
    callbacks: list[keras.callbacks.Callback] = [
        # val_loss never falls by 100, so the learning rate halves after every epoch but the first.
        keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=0, min_delta=100.0),
        # Keras' own TensorBoard logs, at its default relative log_dir ("logs").
        keras.callbacks.TensorBoard(),
    ]
    if config["early_stop"]:
        # val_accuracy never rises by 0.5 after the first epoch: training stops after epoch 2,
        # and the first epoch's weights, the best by that rule, are put back.
        callbacks.append(
            keras.callbacks.EarlyStopping(monitor="val_accuracy", patience=1, min_delta=0.5, restore_best_weights=True)
        )
    class_weight = {digit: 1.0 for digit in range(10)}
    class_weight[8] = 2.0  # the digit this model confuses most
    return {"callbacks": callbacks, "class_weight": class_weight}
