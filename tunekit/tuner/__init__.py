"""KerasTuner's shapes in code, over tunekit's search, with no keras-tuner installed.

``tuner`` holds ``tunekit.Tuner`` and ``tunekit.Hyperband``: a script's ``build_model(hp)`` (or
``HyperModel``), ``search(x, y, ...)`` and ``get_best_models()`` run as a ``tunekit run``
experiment. ``hp`` is the ``hp`` object, ``discover`` the space found by calling the code, ``hp_given`` the
``hyperparameters=`` a tuner is given, ``hypermodel`` the build and fit functions made of a
script's model, ``data`` the arrays or datasets that reach the workers. ``tunekit.keras_tuner``
is the other way in: keras-tuner's own classes (it must be installed) with tunekit's ``search``.
"""
