"""The tensor engine: torch ops under ``with procs.activate():`` run on every rank of a mesh.

Importing this package imports nothing; :mod:`regency._tensor.api` (which imports torch) holds
the public names, reached lazily through ``regency.<name>``. See ADR 0023.
"""
