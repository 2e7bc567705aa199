"""The experiment's storage: every file a search keeps, where it lives, and who may write it.

``store`` is the one owner of the driver's reads and writes (atomic tables and JSON, the study
journal's appends); ``journal`` verifies the study journal whole and ``checksums`` a checkpoint's
payloads; ``clock`` keeps the search's sessions (active time); ``lease`` and ``lease_files`` hold the
single writer, and ``fences`` the check every write makes first; ``buckets`` is where an
experiment lives (a folder or a bucket, with its local cache); ``faults`` tells transient storage
errors from permanent ones. Stdlib at import (pyarrow and boto3 only when a bucket is used), so
the worker, the results and the doctor import from here as cheaply as the driver.
"""
