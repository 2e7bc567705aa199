"""The experiment spec: schema, YAML loading, ``extends``, ``--set`` overrides, the search space.

Pure: imports only the standard library and PyYAML, so ``validate`` and ``plan`` stay instant.
"""
