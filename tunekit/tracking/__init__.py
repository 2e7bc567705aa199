"""MLflow tracking: tag names (``tags``), the driver-side tracker (``tracker``) and its writer thread.

MLflow is imported only by the writer, lazily.
"""
