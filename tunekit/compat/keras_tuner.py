"""keras-tuner's private helpers tunekit's KerasTuner tuners use (keras-tuner 1.4.8).

``tuner_utils`` is keras-tuner's one reader of ``run_trial``'s return value (a float, a dict,
a ``History`` or a list of them: its checks, its metrics and its best step). keras-tuner does
not export it; tunekit reads the return value with it so that it reads it exactly as
KerasTuner does, rather than porting the rules.
"""

from __future__ import annotations

from keras_tuner.src.engine import tuner_utils

__all__ = ["tuner_utils"]
