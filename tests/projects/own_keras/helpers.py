"""A helper module beside the trainable file: the trainable imports it by its plain name."""

from __future__ import annotations

import numpy as np
from sklearn.datasets import load_digits


def digits_split(seed: int) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """scikit-learn's digits, scaled to [0, 1], shuffled with ``seed``, 1,400 to train."""
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype("float32")
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    return (x[:1400], y[:1400]), (x[1400:], y[1400:])
