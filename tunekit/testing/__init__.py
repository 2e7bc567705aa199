"""Helpers for tests and benchmarks that use real parts: ``servers`` (MLflow, PostgreSQL,
TensorBoard, S3 and a breakable proxy on 127.0.0.1, stopped by process group), ``browser``
(headless chromium) and ``runs`` (a run's arguments, a TensorBoard run's events). Never imported
by tunekit itself.
"""
