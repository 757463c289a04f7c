"""The version of regency (one place; peers of another version are refused)."""

__version__ = "0.1.0"
