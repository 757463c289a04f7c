"""The ``regency`` command line."""
