"""tf.data pipelines built the right way round, for trainables to call.

Order matters (tensorflow#47755): decode → cache → shuffle → augment → batch → prefetch.
Caching after a random augmentation would freeze it; caching before keeps decoding
paid once while augmentation still differs every epoch. Parallel maps are bounded by
the trial's CPUs so packed trials do not oversubscribe the machine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import tensorflow as tf

    from tunekit.contract import TrialContext


def from_arrays(
    features: np.ndarray,
    labels: np.ndarray,
    ctx: TrialContext,
    *,
    training: bool,
) -> tf.data.Dataset:
    """Batches in-memory arrays: cached, shuffled each epoch (seeded) when training, prefetched."""
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices((features, labels)).cache()
    if training:
        dataset = dataset.shuffle(len(features), seed=ctx.seed, reshuffle_each_iteration=True)
    return _finish(dataset, ctx)


def _finish(dataset: tf.data.Dataset, ctx: TrialContext) -> tf.data.Dataset:
    import tensorflow as tf

    dataset = dataset.batch(ctx.batch_size).prefetch(tf.data.AUTOTUNE)
    options = tf.data.Options()
    options.threading.private_threadpool_size = ctx.cpus
    options.deterministic = True
    return dataset.with_options(options)


