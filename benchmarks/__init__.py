"""tunekit's benchmark suite: ``python -m benchmarks.run [--quick|--full] [--only NAME] [--out DIR]``.

Benchmarks are not tests: they print ratios measured side by side in one run, and nothing
gates on their timings. See benchmarks/README.md.
"""
