"""Every reach into a private Ray, Optuna or TensorFlow API, one small function each.

This package is the whole upgrade surface: when Ray, Optuna or TensorFlow changes, check
these functions against the new version and nothing else. Each says why tunekit needs
the private part and the version it was checked against. ``ray_tune`` holds Ray Tune's
(``ray_saved_state`` its saved experiment state files, ``ray_workers`` Ray's workers,
``ray_node`` the processes a new local Ray starts),
``optuna_study`` Optuna's, ``tf_keras`` TensorFlow's and Keras's. Importing ``ray_tune``
and ``tf_keras`` is cheap (their functions import Ray and TensorFlow themselves: the
driver's light modules import them); ``optuna_study`` imports Optuna, and only the
searcher and the study's opener import it.
"""
