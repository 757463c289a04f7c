"""Mounts: a controller's directory shown on every host through FUSE (``_remote``, ``_fs``,
``_tree``). The public names are in :mod:`regency.remotemount`."""
