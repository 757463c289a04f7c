"""The observation service's pure parts: store, recorder, telemetry, views and trace shape."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from regency._observe import _recorder, _telemetry, _views
from regency._observe._calls import timed_handle
from regency._observe._recorder import Recorder
from regency._observe._store import Store, connect_readonly, run_query
from regency._observe._trace import trace_events

CTRL = "unix:@regency-j-root"
P0 = "unix:@regency-j-m-0"


def _job(path: Path) -> str:
    """A small job's database: the controller, a proc, an actor, calls, spans, a failure."""
    db = str(path / "j.db")
    store = Store(db)
    store.put([
        ("proc_up", (CTRL, "root", "controller", 0, "h", 1, 100)),
        ("proc_up", (P0, "m", "trainers", 0, "h", 2, 110)),
        ("actor_up", ("a{'r': 0}", "a", "a", "M.A", "{'r': 0}", P0, 120)),
        ("actor_up", ("b{'r': 0}", "b", "b", "M.B", "{'r': 0}", P0, 121)),
        ("calls", (1000, 1500, P0, "a{'r': 0}", "root", "a", "step", 64, 1)),
        ("calls", (1200, 1300, P0, "b{'r': 0}", "a{'r': 0}", "b", "inner", 32, 1)),
        ("spans", (1100, 1400, P0, "a{'r': 0}", "load", 7)),
        ("call_counts", (2_000_000, P0, "a{'r': 0}", "a", "step", 5, 1)),
        ("logs", (130, P0, "trainers {'r': 0}", "stdout", "hello")),
        ("events", (140, "failure", CTRL, "b{'r': 0}", "b", "boom", json.dumps({"x": 1}))),
        ("actor_end", ("b{'r': 0}", 150, "failed", "report")),
        ("proc_sample", (160, 12.5, 1 << 20, P0)),
        ("actor_sample", (160, 3, 5, 2.5, "a{'r': 0}")),
    ])
    assert store.flushed()
    store.close()
    return db


def test_store_keeps_state_tables_current(tmp_path: Path) -> None:
    db = connect_readonly(_job(tmp_path))
    _, procs = run_query(db, "SELECT proc, state, cpu, rss FROM procs ORDER BY proc")
    assert procs == [(P0, "running", 12.5, 1 << 20), (CTRL, "running", None, None)]
    _, actors = run_query(db, "SELECT actor, state, failure, queue, handled FROM actors "
                              "ORDER BY actor")
    assert actors == [("a{'r': 0}", "running", None, 3, 5), ("b{'r': 0}", "failed", "report",
                                                             0, 0)]


def test_an_end_written_before_the_start_stays(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "y.db"))
    store.put([("actor_end", ("a", 5, "failed", "why"))])
    store.put([("actor_up", ("a", "m", "a", "A", "{}", P0, 2))])
    assert store.flushed()
    store.close()
    db = connect_readonly(str(tmp_path / "y.db"))
    assert run_query(db, "SELECT state, failure, proc FROM actors")[1] == [("failed", "why", P0)]


def test_store_ends_a_procs_running_actors(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "x.db"))
    store.put([("proc_up", (P0, "m", "t", 0, "h", 2, 1)),
               ("actor_up", ("a", "a", "a", "A", "{}", P0, 2))])
    store.put([("proc_end", (P0, 3, "failed", "killed by signal SIGKILL")),
               ("proc_actors_end", (3, "failed", P0))])
    assert store.flushed()
    store.close()
    db = connect_readonly(str(tmp_path / "x.db"))
    assert run_query(db, "SELECT state FROM actors")[1] == [("failed",)]
    assert run_query(db, "SELECT cause FROM procs")[1] == [("killed by signal SIGKILL",)]


def test_views_tree_nests_hosts_procs_actors(tmp_path: Path) -> None:
    db = connect_readonly(_job(tmp_path))
    tree = _views.tree(db)
    [host] = tree["hosts"]
    assert host["host"] == "h"
    ctrl, proc = host["procs"]
    assert ctrl["mesh_name"] == "controller" and ctrl["actors"] == []
    assert [a["actor"] for a in proc["actors"]] == ["a{'r': 0}", "b{'r': 0}"]
    assert proc["last_failure"] == "boom"  # recorded at the owner, shown on the actor's proc
    assert proc["log_tail"] == ["hello"] and proc["queue"] == 3 and proc["rate"] == 2.5
    assert _views.logs(db, search="hell")[0]["line"] == "hello"
    assert _views.logs(db, search="nothing") == []
    assert _views.events(db, kind="failure")[0]["detail"] == {"x": 1}
    thr = _views.throughput(db, 10)
    assert thr["meshes"][0]["name"] == "a" and sum(thr["meshes"][0]["per_second"]) == 5


def test_trace_has_one_track_per_proc_and_flows(tmp_path: Path) -> None:
    trace = trace_events(connect_readonly(_job(tmp_path)))
    events = trace["traceEvents"]
    assert json.loads(json.dumps(trace)) == trace  # plain JSON
    procs = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert sorted(procs.values()) == ["controller (pid 1)", "trainers rank 0 (pid 2)"]
    for e in events:
        assert e["ph"] in {"M", "X", "s", "f"}
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "X":
            assert e["dur"] >= 1 and isinstance(e["ts"], int)
    slices = [e for e in events if e["ph"] == "X" and e["cat"] in ("call", "span")]
    assert {e["name"] for e in slices} == {"step", "inner", "load"}
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts.keys() == ends.keys() and len(starts) == 2
    root_flow = next(s for s in starts.values() if s["pid"] == 1)
    assert ends[root_flow["id"]]["pid"] == 2 and ends[root_flow["id"]]["bp"] == "e"
    # the actor-to-actor call flows between two threads of the same proc
    inner = next(s for s in starts.values() if s["pid"] == 2)
    assert ends[inner["id"]]["tid"] != inner["tid"]
    assert trace["otherData"]["calls_and_spans"] == 3


class _Call:
    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.sender = "root"


def test_calls_are_counted_always_and_recorded_within_budget() -> None:
    sent: list[Any] = []
    rec = Recorder("p", sent.extend, call_rate=4)  # 2 per half-second flush
    tap = rec.tap("a", "m")
    handle = timed_handle(lambda call, frame: 7, tap, rec, False, lambda: False)
    frame = [memoryview(b"abc"), memoryview(b"de")]
    assert [handle(_Call("go"), frame) for _ in range(5)] == [7] * 5
    rec.flush()
    calls = [v for t, v in sent if t == "calls"]
    counts = [v for t, v in sent if t == "call_counts"]
    assert len(calls) == 2 and calls[0][7] == 5  # bytes of the frame
    assert counts == [(counts[0][0], "p", "a", "m", "go", 5, 2)]
    sent.clear()
    handle(_Call("go"), frame)
    rec.flush()  # a fresh budget; counts are deltas
    assert [v[5:] for t, v in sent if t == "call_counts"] == [(1, 1)]


def test_async_calls_are_timed_when_awaited() -> None:
    rec = Recorder("p", lambda rows: None, call_rate=100)
    tap = rec.tap("a", "m")

    async def inner(call: Any, frame: Any) -> None:
        await asyncio.sleep(0)

    handle = timed_handle(inner, tap, rec, True, lambda: False)
    asyncio.run(handle(_Call("x"), []))
    assert tap.counts == {"x": 1} and len(rec.rows) == 1


def test_metrics_and_spans_record_only_with_a_recorder() -> None:
    meter = _telemetry.get_meter()
    counter = meter.create_counter("c")
    hist = meter.create_histogram("h")
    counter.add(1)  # no recorder: nothing, no error
    with _telemetry.span("s"):
        pass
    sent: list[Any] = []
    rec = Recorder("p", sent.extend, call_rate=10)
    _recorder.set_active(rec)
    try:
        counter.add(2, {"k": 1})
        counter.add(3, {"k": 1})
        hist.record(0.5)
        with pytest.raises(ValueError, match="amounts >= 0"):
            counter.add(-1)

        @_telemetry.traced
        def work() -> int:
            return 1

        @_telemetry.traced(name="named")
        async def awork() -> int:
            return 2

        assert work() == 1 and asyncio.run(awork()) == 2
        rec.flush()
    finally:
        _recorder.set_active(None)
    metrics = sorted(v[2:7] for t, v in sent if t == "metrics")
    assert metrics == [("c", "counter", 5.0, 2, '{"k": 1}'), ("h", "histogram", 0.5, 1, None)]
    assert sorted(v[4] for t, v in sent if t == "spans") == ["named", "work"]


def test_calls_answer_the_fields_asked_for(tmp_path: Path) -> None:
    db = connect_readonly(_job(tmp_path))
    rows = _views.calls(db, start_us=0, fields=["start_us", "proc", "ok"])
    assert rows == [{"start_us": 1000, "proc": P0, "ok": 1}, {"start_us": 1200, "proc": P0,
                                                              "ok": 1}]
    with pytest.raises(ValueError, match="no call field 'secret'"):
        _views.calls(db, start_us=0, fields=["start_us", "secret"])


def test_throughput_of_a_database_without_the_table(tmp_path: Path) -> None:
    path = _job(tmp_path)
    import sqlite3

    raw = sqlite3.connect(path)
    raw.execute("DROP TABLE throughput")  # as written before the table existed
    raw.commit()
    raw.close()
    thr = _views.throughput(connect_readonly(path), 10)
    assert [m["per_second"][-1] for m in thr["meshes"]] == [5]
    assert thr["seconds"][-1] == 2


def test_the_api_says_why_stacks_cannot_be_had(tmp_path: Path) -> None:
    import urllib.error
    import urllib.request

    from regency._observe._server import ApiServer

    def no_controller(addr: str) -> str:
        raise LookupError(f"no controller for {addr}")

    server = ApiServer(_job(tmp_path), stacks=no_controller).start()
    try:
        req = urllib.request.Request(f"{server.url}/api/v1/stack?proc={P0}",
                                     headers={"Authorization": f"Bearer {server.token}"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=10)
        assert err.value.code == 501
        assert json.loads(err.value.read()) == {"error": "not_available",
                                                "message": f"no controller for {P0}"}
    finally:
        server.close()
