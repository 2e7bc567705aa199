"""The fault explorer: seeded fault histories against a real search, invariants checked after each.

A history is one small search (``tests/trainables/slow_digits.py``, tracked to MLflow on a
SQLite file) driven by the ``tunekit`` command as a user drives it, with a few seeded faults
at seeded moments (``faults.py`` holds the registry of fault kinds and their injectors), each
followed by what a user does next: ``tunekit resume``, or the documented repair when a resume
refuses (restore the damaged file from a copy), until the search completes. Then
``invariants.py`` reads the experiment's files, the study and MLflow's database itself, and
``tunekit check`` must agree with it.

    python -m benchmarks.chaos --histories N [--seed S] [--out DIR]
    python -m benchmarks.chaos --replay SEED [--out DIR]

The explorer changes nothing in tunekit: it runs the command and reads files. It is not a
benchmark of speed; its figure is the number of violations, target 0.
"""
