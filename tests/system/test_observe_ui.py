"""A live recording job seen through its HTTP API, ``regency top`` (in tmux) and the web
dashboard (headless Chromium) (issue 16)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_observe_recording import Job

# each wait below is bounded (``until``, 90 s) below this, so a slow machine shows the screen
pytestmark = pytest.mark.timeout(240)

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Job, dict[str, Any]]]:
    """A job serving its dashboard (config ``dashboard``), waiting at READY."""
    tmp = tmp_path_factory.mktemp("observe_ui")
    job = Job(tmp, "dashboard")
    try:
        [info_file] = job.dir.glob("*.json")
        info = json.loads(info_file.read_text())
        yield job, info
        job.finish()
    finally:
        job.kill()


def get(info: dict[str, Any], path: str, token: str | None = None) -> tuple[int, Any]:
    req = urllib.request.Request(f"{info['url']}/api/v1/{path}", headers={
        "Authorization": f"Bearer {info['token'] if token is None else token}"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def until(what: str, check: Callable[[], Any], timeout: float = 90.0,
          shown: Callable[[], str] = lambda: "") -> Any:
    """Wait (bounded) for ``check()`` to be true: recorded rows arrive in batches."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{shown()}")
        time.sleep(0.1)


def whole_tree(info: dict[str, Any]) -> Any:
    """The job's tree once every proc and actor is in it, sampled and logging (bounded)."""
    def full_tree() -> Any:
        tree = get(info, "tree")[1]
        procs = [p for h in tree["hosts"] for p in h["procs"]]
        return tree if len(procs) == 3 and all(
            len(p["actors"]) == 3 and p["rss"] and p["log_tail"]
            for p in procs if p["mesh_name"] == "trainers") else None

    return until("the whole tree", full_tree)


def test_api_is_local_and_needs_the_token(live: tuple[Job, dict[str, Any]]) -> None:
    _job, info = live
    assert info["url"].startswith("http://127.0.0.1:")
    assert get(info, "tree", token="wrong")[0] == 401
    assert get(info, "tree", token="")[0] == 401
    with urllib.request.urlopen(f"{info['url']}/api/v1/health", timeout=10) as r:
        assert json.loads(r.read()) == {"status": "ok"}
    assert get(info, "nothing")[0] == 404
    status, err = get(info, "calls?start_us=abc")
    assert status == 400 and "not a number" in err["message"]


def test_api_tree_events_calls_logs(live: tuple[Job, dict[str, Any]]) -> None:
    _job, info = live
    tree = whole_tree(info)
    [host] = tree["hosts"]
    trainers = [p for p in host["procs"] if p["mesh_name"] == "trainers"]
    assert all(p["state"] == "running" and p["pid"] for p in trainers)
    assert all(p["last_failure"] == "RuntimeError: broken on purpose" for p in trainers)
    assert {a["name"]: a["state"] for a in trainers[0]["actors"]} == {
        "workers": "running", "helpers": "running", "broken": "failed"}
    # every view below is filled by the store's writer in its own batches: wait for each
    events = until("two failure events", lambda: (
        lambda ev: len(ev) == 2 and ev)(get(info, "events?kind=failure")[1]))
    assert "report" in events[0]["detail"]
    calls = until("calls", lambda: len(get(info, "calls")[1]) == 80 and get(info, "calls")[1])
    assert {c["endpoint"] for c in calls} == {"step", "work"}
    logs = until("both step-19 lines", lambda: (
        lambda rows: len(rows) == 2 and rows)(get(info, "logs?q=step%2019")[1]))
    assert [x["line"] for x in logs] == ["worker step 19", "worker step 19"]
    until("80 calls in the throughput plot", lambda: sum(
        sum(m["per_second"]) for m in get(info, "throughput")[1]["meshes"]) == 80,
        shown=lambda: str(get(info, "throughput")[1]))
    until("160 calls and spans in the trace", lambda: get(info, "trace")[1][
        "otherData"]["calls_and_spans"] == 160)
    status, answer = get(info, f"stack?proc={trainers[0]['proc']}")
    assert status == 200 and "(most recent call first)" in answer["stacks"]
    assert "trainers ranks 0" in answer["stacks"]


def test_api_query(live: tuple[Job, dict[str, Any]]) -> None:
    _job, info = live
    req = urllib.request.Request(
        f"{info['url']}/api/v1/query", data=json.dumps({"sql": "SELECT 1 + 1 AS two"}).encode(),
        headers={"Authorization": f"Bearer {info['token']}"}, method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        assert json.loads(r.read()) == {"columns": ["two"], "rows": [[2]]}


_SOCKET = f"regency-test-{uuid.uuid4().hex[:8]}"  # a tmux server of our own


def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", "-L", _SOCKET, *args], capture_output=True, text=True,
                          timeout=20).stdout


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_top_shows_the_tree_filters_and_shows_a_log(live: tuple[Job, dict[str, Any]]) -> None:
    pytest.importorskip("textual")
    job, _info = live
    session = f"regency-top-{uuid.uuid4().hex[:8]}"
    # COLUMNS/LINES from this process would override the pane's size
    cmd = f"env -u COLUMNS -u LINES {sys.executable} -m regency top --dir {job.dir} --interval 0.5"
    _tmux("new-session", "-d", "-s", session, "-x", "160", "-y", "40", cmd)
    _tmux("set-option", "-w", "-t", session, "remain-on-exit", "on")  # an error stays readable
    try:
        def screen() -> str:
            return _tmux("capture-pane", "-p", "-t", session)

        until("the tree on screen", lambda: "helpers" in screen() and "trainers rank 1"
              in screen() and "RuntimeError: broken" in screen(), shown=screen)
        text = screen()
        assert "host " in text and "running" in text and "failed" in text
        _tmux("send-keys", "-t", session, "/")
        until("the filter box", lambda: "filter: mesh, actor" in screen(), shown=screen)
        _tmux("send-keys", "-t", session, "-l", "workers")
        _tmux("send-keys", "-t", session, "Enter")
        until("the filter applied", lambda: "helpers" not in screen()
              and "workers" in screen(), shown=screen)
        _tmux("send-keys", "-t", session, "Down")
        until("the proc selected", lambda: "address unix:" in screen(), shown=screen)
        _tmux("send-keys", "-t", session, "l")
        until("a proc's log", lambda: "log of trainers rank 0" in screen()
              and "worker step 19" in screen(), shown=screen)
        _tmux("send-keys", "-t", session, "s")
        until("the proc's stacks", lambda: "stacks of trainers rank 0" in screen()
              and "thread in trainers ranks 0" in screen(), shown=screen)
        _tmux("send-keys", "-t", session, "q")
        until("top to quit", lambda: _tmux("display-message", "-p", "-t", session,
                                           "#{pane_dead}").strip() == "1", timeout=15,
              shown=screen)
    finally:
        _tmux("kill-server")


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed")
def test_dashboard_page_in_headless_chromium(live: tuple[Job, dict[str, Any]],
                                             tmp_path: Path) -> None:
    _job, info = live
    until("the recorded calls", lambda: len(get(info, "calls")[1]) == 80)
    url = f"{info['url']}/#token={info['token']}"
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
             "--virtual-time-budget=4000", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*flags, "--dump-dom", url], capture_output=True, text=True,
                         timeout=60).stdout
    assert 'data-loaded="yes"' in dom, dom[:2000]
    for needle in ('id="tree"', "trainers rank 0", "__main__.Worker",
                   "RuntimeError: broken on purpose", 'class="call"', 'class="failure"',
                   'class="mesh-line"', "worker step 19", "failures 2"):
        assert needle in dom, needle
    shot = tmp_path / "dashboard.png"
    subprocess.run([*flags, "--window-size=1400,1000", f"--screenshot={shot}", url],
                   capture_output=True, timeout=60)
    assert shot.exists() and shot.stat().st_size > 10_000


@pytest.fixture
def separate_dashboard(live: tuple[Job, dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """``regency dashboard`` in a process of its own, over the live job's database."""
    job, _info = live
    proc = subprocess.Popen([sys.executable, "-m", "regency", "dashboard", "--dir", str(job.dir)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()  # its announcement (bounded by the test's timeout)
        assert line.startswith("regency dashboard: http://127.0.0.1:"), line
        url, _, token = line.split()[2].partition("/#token=")
        # keep reading what it says, so a full pipe can never block the server
        later: list[str] = []
        threading.Thread(target=lambda: later.extend(proc.stderr or ()), daemon=True).start()
        whole_tree({"url": url, "token": token})  # the tests may run first (-k, a rerun)
        yield {"url": url, "token": token, "stderr": later}
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_a_separate_dashboard_shows_stacks_through_the_controller(
        live: tuple[Job, dict[str, Any]], separate_dashboard: dict[str, Any]) -> None:
    other = separate_dashboard
    tree = get(other, "tree")[1]
    [proc] = [p for h in tree["hosts"] for p in h["procs"]
              if p["mesh_name"] == "trainers" and p["rank"] == 1]
    status, answer = get(other, f"stack?proc={proc['proc']}")
    assert status == 200, answer
    assert "(most recent call first)" in answer["stacks"]
    assert "trainers ranks 1" in answer["stacks"] and "ranks 0" not in answer["stacks"]
    status, answer = get(other, "stack?proc=unix:@no-such-proc")
    assert status == 200 and "no live proc at unix:@no-such-proc" in answer["stacks"]


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed")
def test_the_dashboard_stacks_button_of_a_separate_dashboard(
        separate_dashboard: dict[str, Any], tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).parents[2]))
    from benchmarks._cdp import Browser

    other = separate_dashboard
    browser = Browser(str(tmp_path / "profile"))
    try:
        browser.navigate(f"{other['url']}/#token={other['token']}")
        browser.wait_for("document.body && document.body.dataset.loaded === 'yes'")
        assert int(browser.evaluate("document.body.dataset.firstRenderMs")) > 0
        assert browser.evaluate("document.body.dataset.treeRows") == str(
            browser.evaluate("document.querySelectorAll('#tree tbody tr:not(.spacer)').length"))
        browser.evaluate("""(() => {
            const s = document.getElementById('log-proc');
            const o = [...s.options].find(o => o.textContent === 'trainers 0');
            s.value = o.value; s.dispatchEvent(new Event('change'));
            document.getElementById('stack-button').click(); })()""")
        text = browser.wait_for("document.getElementById('stacks').dataset.loaded === 'yes' "
                                "&& document.getElementById('stacks').textContent")
        assert "trainers ranks 0" in text and "(most recent call first)" in text, text
    finally:
        browser.close()


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_top_over_a_separate_dashboard_shows_stacks(separate_dashboard: dict[str, Any]) -> None:
    pytest.importorskip("textual")
    other = separate_dashboard
    session = f"regency-top-{uuid.uuid4().hex[:8]}"
    cmd = (f"env -u COLUMNS -u LINES {sys.executable} -m regency top --url {other['url']} "
           f"--token={other['token']} --interval 0.5")
    _tmux("new-session", "-d", "-s", session, "-x", "160", "-y", "40", cmd)
    _tmux("set-option", "-w", "-t", session, "remain-on-exit", "on")
    try:
        def screen() -> str:
            return _tmux("capture-pane", "-p", "-t", session)

        def shown() -> str:
            return screen() + "\nthe dashboard's stderr:\n" + "".join(other["stderr"])

        until("the tree on screen", lambda: "trainers rank 0" in screen(), shown=shown)
        _tmux("send-keys", "-t", session, "Down", "Down")  # the controller, then trainers 0
        until("trainers 0 selected", lambda: "proc trainers rank 0" in screen(), shown=screen)
        _tmux("send-keys", "-t", session, "s")
        until("its stacks, asked of the controller", lambda: "stacks of trainers rank 0"
              in screen() and "thread in trainers ranks 0" in screen(), shown=screen)
        _tmux("send-keys", "-t", session, "q")
    finally:
        _tmux("kill-server")
