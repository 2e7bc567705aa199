"""Every reach into a private Ray, Optuna or TensorFlow API, one small function each.

This package is the whole upgrade surface: when Ray, Optuna or TensorFlow changes, check
these functions against the new version and nothing else. Each says why tunekit needs
the private part and the version it was checked against. Importing them is cheap: every
function imports its library itself. ``ray_tune`` holds Ray Tune's, ``optuna_study``
Optuna's, ``tf_keras`` TensorFlow's and Keras's.
"""
