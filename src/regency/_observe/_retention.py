"""How long a job's store keeps what it records: an age and a row limit, applied in batches.

``observe_retention_secs`` (default 3600, as Monarch's ``TelemetryConfig.retention_secs``)
deletes rows older than that from the tables that grow with traffic: ``calls``,
``call_counts``, ``throughput``, ``logs``, ``spans`` and ``metrics``. ``observe_max_rows``
(default 0: none) keeps at most that many rows in each of them, the oldest going first.
``events`` (spawns, exits, failures), ``procs``, ``actors`` and ``job`` are never trimmed:
they stay small and say what happened.

The store's writer thread applies it (:class:`Retention` only says what to delete): a sweep
is due every tenth of the age limit, between 30 s and 5 min (every 30 s with a row limit
only), and deletes at most ``batch`` rows per transaction, going back to writing between
batches, so recording never waits long behind it.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from .. import config

__all__ = ["TRIMMED", "Retention"]

#: the tables trimmed, and the time column of each (``throughput``'s is in seconds)
TRIMMED: dict[str, str] = {"calls": "start_us", "call_counts": "ts_us", "throughput": "s",
                           "logs": "ts_us", "spans": "start_us", "metrics": "ts_us"}


@dataclass(frozen=True)
class Retention:
    """What a store keeps: rows younger than ``max_age_s`` (0: any age), at most
    ``max_rows`` per table (0: any number)."""

    max_age_s: float = 0.0
    max_rows: int = 0
    batch: int = 5000

    @classmethod
    def from_config(cls) -> Retention:
        """The policy of the config keys ``observe_retention_secs`` and ``observe_max_rows``."""
        return cls(float(config.get("observe_retention_secs")),
                   int(config.get("observe_max_rows")))

    @property
    def active(self) -> bool:
        """Whether anything is ever deleted."""
        return self.max_age_s > 0 or self.max_rows > 0

    @property
    def every_s(self) -> float:
        """Seconds between sweeps."""
        if self.max_age_s > 0:
            return min(300.0, max(30.0, self.max_age_s / 10))
        return 30.0

    def trim_batch(self, db: sqlite3.Connection, now_us: int) -> int:
        """Delete at most ``batch`` rows that the policy drops; 0 when none is left."""
        for table, column in TRIMMED.items():
            if self.max_age_s > 0:
                cutoff = now_us - int(self.max_age_s * 1_000_000)
                if column == "s":
                    cutoff //= 1_000_000
                n = self._delete(db, table, f"{column} < ?", cutoff)
                if n:
                    return n
            if self.max_rows > 0:
                top = db.execute(f"SELECT max(rowid) FROM {table}").fetchone()[0] or 0
                if top > self.max_rows:
                    n = self._delete(db, table, "rowid <= ?", top - self.max_rows)
                    if n:
                        return n
        return 0

    def _delete(self, db: sqlite3.Connection, table: str, where: str, value: int) -> int:
        cur = db.execute(f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table} "
                         f"WHERE {where} LIMIT ?)", (value, self.batch))
        return max(0, cur.rowcount)
