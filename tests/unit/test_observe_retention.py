"""The event store's retention policy (``observe_retention_secs``, ``observe_max_rows``) and
its ``throughput`` table (issue 16)."""

from __future__ import annotations

from pathlib import Path

from regency import config
from regency._observe._recorder import now_us
from regency._observe._retention import TRIMMED, Retention
from regency._observe._store import Store, connect_readonly, run_query

P0 = "unix:@regency-j-m-0"
HOUR_US = 3_600_000_000


def _rows(ts: int, tag: str) -> list[tuple[str, tuple[object, ...]]]:
    """One row of every append-only table, at ``ts``."""
    return [
        ("calls", (ts, ts + 10, P0, "a{}", "root", "a", tag, 8, 1)),
        ("call_counts", (ts, P0, "a{}", "a", tag, 3, 1)),
        ("logs", (ts, P0, "t {}", "stdout", tag)),
        ("spans", (ts, ts + 5, P0, "a{}", tag, 1)),
        ("metrics", (ts, P0, tag, "counter", 1.0, 1, None)),
        ("events", (ts, "spawn", P0, "a{}", "a", tag, None)),
    ]


def _count(db_path: str, table: str) -> int:
    return int(run_query(connect_readonly(db_path), f"SELECT count(*) FROM {table}")[1][0][0])


def test_rows_older_than_the_retention_go_and_events_stay(tmp_path: Path) -> None:
    path = str(tmp_path / "r.db")
    store = Store(path, Retention(max_age_s=3600, batch=1))  # one row per step: many steps
    now = now_us()
    store.put(_rows(now - 2 * HOUR_US, "old") + _rows(now - HOUR_US - 1_000_000, "old")
              + _rows(now - 60_000_000, "new"))
    assert store.flushed()
    assert store.trim()
    store.close()
    db = connect_readonly(path)
    for table in ("calls", "call_counts", "spans"):
        assert run_query(db, f"SELECT endpoint FROM {table}" if table != "spans"
                         else "SELECT name FROM spans")[1] == [("new",)], table
    assert run_query(db, "SELECT line FROM logs")[1] == [("new",)]
    assert run_query(db, "SELECT name FROM metrics")[1] == [("new",)]
    assert _count(path, "events") == 3  # never trimmed
    assert run_query(db, "SELECT s FROM throughput")[1] == [((now - 60_000_000) // 1_000_000,)]
    assert store.trimmed == 2 * 6  # two old rows in each of the six trimmed tables


def test_at_most_max_rows_stay_the_newest(tmp_path: Path) -> None:
    path = str(tmp_path / "m.db")
    store = Store(path, Retention(max_rows=3, batch=2))
    now = now_us()
    store.put([("logs", (now + i, P0, "t", "stdout", f"line {i}")) for i in range(10)])
    assert store.flushed()
    assert store.trim()
    store.close()
    db = connect_readonly(path)
    assert [r[0] for r in run_query(db, "SELECT line FROM logs ORDER BY ts_us")[1]] == [
        "line 7", "line 8", "line 9"]


def test_no_policy_keeps_everything(tmp_path: Path) -> None:
    path = str(tmp_path / "k.db")
    store = Store(path, Retention())
    store.put(_rows(1, "ancient"))
    assert store.flushed()
    assert store.trim()
    store.close()
    assert all(_count(path, t) == 1 for t in TRIMMED)


def test_throughput_sums_call_counts_per_mesh_and_second(tmp_path: Path) -> None:
    path = str(tmp_path / "t.db")
    store = Store(path, Retention())
    store.put([("call_counts", (5_000_000, P0, "a{0}", "a", "step", 3, 3)),
               ("call_counts", (5_400_000, P0, "a{1}", "a", "step", 4, 2)),
               ("call_counts", (6_100_000, P0, "b{0}", "b", "go", 1, 1))])
    store.put([("call_counts", (5_900_000, P0, "a{0}", "a", "other", 2, 0))])  # a later batch
    assert store.flushed()
    store.close()
    rows = run_query(connect_readonly(path), "SELECT s, mesh, n FROM throughput ORDER BY s, mesh")
    assert rows[1] == [(5, "a", 9), (6, "b", 1)]


def test_the_policy_comes_from_the_config_keys() -> None:
    assert Retention.from_config() == Retention(3600.0, 0)  # Monarch's default window
    with config.configured(observe_retention_secs=120, observe_max_rows=1000):
        policy = Retention.from_config()
    assert (policy.max_age_s, policy.max_rows, policy.active) == (120.0, 1000, True)
    assert not Retention(0, 0).active
    # a sweep every tenth of the window, between 30 s and 5 min; 30 s with a row limit only
    assert [Retention(a, 0).every_s for a in (60, 1200, 36000)] == [30.0, 120.0, 300.0]
    assert Retention(0, 10).every_s == 30.0
