"""Benchmark suite comparing regency against its peers (Monarch and Ray).

Entry point: ``python -m benchmarks.run --help``. See ``benchmarks/README.md``.
"""
