"""``regency top``: a terminal view of a running job, over its HTTP API (needs ``textual``).

The left pane is the tree hosts -> procs -> actors as an indented table (state, pid, CPU,
memory, queue depth, messages/s, last failure), refreshed every ``--interval`` seconds. The
right pane shows the selected proc: its details and last log lines, or, on a key, its whole
log or its stacks. Keys: ``/`` filter, ``escape`` clear the filter, ``l`` log, ``s`` stacks,
``d`` details, ``q`` quit. Fetches run on a worker thread, so keys answer while a refresh is
on its way; a refresh whose rows are the same updates only the cells that changed, and the
header says how long it took.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, ClassVar

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import DataTable, Footer, Header, Input, Static

__all__ = ["TopApp", "run_top"]


class ApiClient:
    """GETs of the job's API with its token."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url.rstrip("/")
        self.token = token

    def get(self, path: str, **params: Any) -> Any:
        """The decoded JSON of ``/api/v1/<path>``; an error object on failure."""
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        req = urllib.request.Request(f"{self.url}/api/v1/{path}?{query}",
                                     headers={"Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as exc:
            try:
                return json.loads(exc.read())
            except ValueError:
                return {"error": str(exc.code), "message": str(exc)}
        except OSError as exc:
            return {"error": "unreachable", "message": str(exc)}


def _cause(report: str | None) -> str:
    """The line of a failure report that says why."""
    for line in (report or "").splitlines():
        if line.strip().startswith("cause:"):
            return line.split("cause:", 1)[1].strip()
    return (report or "").split("\n")[0]


def _mib(rss: Any) -> str:
    return f"{rss / 1048576:.0f}M" if rss else ""


class TopApp(App[int]):
    """The job's tree and the selected proc's details."""

    TITLE = "regency top"
    CSS = """
    #tree { width: 2fr; }
    #detail { width: 1fr; border-left: solid $accent; padding: 0 1; }
    #filter { display: none; }
    #filter.shown { display: block; }
    """
    BINDINGS: ClassVar[list[Any]] = [
        Binding("q", "quit", "quit"),
        Binding("slash", "filter", "filter"),
        Binding("escape", "clear_filter", "clear filter"),
        Binding("l", "show('log')", "log"),
        Binding("s", "show('stack')", "stacks"),
        Binding("d", "show('details')", "details"),
    ]

    def __init__(self, client: ApiClient, interval: float = 1.0) -> None:
        super().__init__()
        self.client = client
        self.interval = interval
        self.filter = ""
        self.mode = "details"
        self.rows: list[dict[str, Any]] = []  # one per table row: its proc (and actor)
        self.data: dict[str, Any] = {}
        self.columns: list[Any] = []
        self.timings: list[tuple[float, float]] = []  # (fetch, draw) seconds per refresh
        self._keys: list[str] = []  # the table's row keys, in order
        self._cells: list[tuple[str, ...]] = []  # what each row shows
        self._fetching = False
        self._log: Any = None  # the selected proc's log, in log mode
        self._log_of = ""  # whose log that is
        self._stacks: dict[str, str] = {}  # proc -> stacks, taken on the key

    def compose(self) -> ComposeResult:
        yield Header()
        yield Input(placeholder="filter: mesh, actor, class or state", id="filter")
        with Horizontal():
            yield DataTable(id="tree", cursor_type="row", zebra_stripes=True)
            yield Static("", id="detail")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#tree", DataTable)
        self.columns = table.add_columns("name", "state", "pid", "cpu%", "mem", "queue",
                                         "msg/s", "last failure")
        table.focus()  # not the hidden filter box, which comes first
        self.refresh_data()
        self.set_interval(self.interval, self.refresh_data)

    # -- data -----------------------------------------------------------------------------------
    def refresh_data(self) -> None:
        """Fetch the tree off the UI thread, then redraw (one fetch at a time)."""
        if not self._fetching:
            self._fetching = True
            self._fetch()

    @work(thread=True, group="fetch")
    def _fetch(self) -> None:
        began = time.perf_counter()
        try:
            tree = self.client.get("tree", log_tail=5)
            sel = self._selected().get("proc")
            if self.mode == "log" and sel is not None:
                log = self.client.get("logs", proc=sel["proc"], limit=200)
                self.call_from_thread(self._got_log, sel["proc"], log, False)
        except (OSError, ValueError) as exc:  # never leave _fetching set: refreshes would stop
            tree = {"error": "client", "message": str(exc)}
        self.call_from_thread(self._apply, tree, time.perf_counter() - began)

    def _apply(self, tree: Any, fetch_s: float) -> None:
        self._fetching = False
        began = time.perf_counter()
        if "error" in tree:
            self.sub_title = f"API error: {tree.get('message')}"
            return
        self.data = tree
        self._draw()
        if self.mode != "stack":  # stacks are taken on the key, not every second
            self._detail()
        drawn = time.perf_counter() - began
        self.timings.append((fetch_s, drawn))
        del self.timings[:-120]
        self.sub_title = (f"{self.client.url}  filter: {self.filter or '(none)'}  updated in "
                          f"{1000 * (fetch_s + drawn):.0f} ms")

    def _matches(self, *texts: Any) -> bool:
        f = self.filter.lower()
        return not f or any(f in str(t or "").lower() for t in texts)

    def _lines(self) -> list[tuple[str, tuple[str, ...], dict[str, Any]]]:
        """The table's rows: (key, cells, selection) each."""
        out: list[tuple[str, tuple[str, ...], dict[str, Any]]] = []
        for host in self.data.get("hosts", []):
            out.append((f"h {host['host']}", (f"host {host['host']}", "", "", "", "", "", "",
                                               ""), {}))
            for p in host["procs"]:
                actors = [a for a in p["actors"]
                          if self._matches(a["actor"], a["class"], a["state"], p["mesh_name"])]
                if not actors and not self._matches(p["mesh_name"], p["proc"], p["state"]):
                    continue
                out.append((f"p {p['proc']}", (
                    f"  {p['mesh_name']} rank {p['rank']}", p["state"], str(p["pid"] or ""),
                    str(p["cpu"] or 0), _mib(p["rss"]), str(p["queue"]), str(p["rate"]),
                    p["last_failure"] or ""), {"proc": p}))
                for a in actors:
                    out.append((f"a {a['actor']}", (
                        f"    {a['name']}{a['rank']} {a['class']}", a["state"], "", "", "",
                        str(a["queue"] or 0), str(a["rate"] or 0), _cause(a["failure"])),
                        {"proc": p, "actor": a}))
        return out

    def _draw(self) -> None:
        """Show the tree: cells that changed, or every row when the rows changed."""
        table = self.query_one("#tree", DataTable)
        lines = self._lines()
        keys = [k for k, _, _ in lines]
        if keys == self._keys:
            for (key, cells, _), old in zip(lines, self._cells):
                for column, new, was in zip(self.columns, cells, old):
                    if new != was:
                        table.update_cell(key, column, new)
        else:
            keep = table.cursor_row
            table.clear()
            for key, cells, _ in lines:
                table.add_row(*cells, key=key)
            if lines:
                table.move_cursor(row=min(max(keep, 0), len(lines) - 1))
        self._keys = keys
        self._cells = [cells for _, cells, _ in lines]
        self.rows = [sel for _, _, sel in lines]

    def _selected(self) -> dict[str, Any]:
        row = self.query_one("#tree", DataTable).cursor_row
        return self.rows[row] if 0 <= row < len(self.rows) else {}

    def _detail(self) -> None:
        sel = self._selected()
        pane = self.query_one("#detail", Static)
        proc = sel.get("proc")
        if proc is None:
            pane.update("select a proc or an actor (arrow keys)")
            return
        if self.mode == "log":
            mine = isinstance(self._log, list) and self._log_of == proc["proc"]
            lines = self._log if mine else []
            text = "\n".join(line["line"] for line in lines)
            pane.update(f"log of {proc['mesh_name']} rank {proc['rank']}\n\n{text}")
        elif self.mode == "stack":
            pane.update(f"stacks of {proc['mesh_name']} rank {proc['rank']}\n\n"
                        f"{self._stacks.get(proc['proc'], 'asking the proc for its stacks...')}")
        else:
            pane.update(self._describe(proc, sel.get("actor")))

    @work(thread=True, group="detail")
    def _fetch_detail(self, mode: str, proc: str) -> None:
        """The selected proc's log or stacks, off the UI thread."""
        if mode == "log":
            got = self.client.get("logs", proc=proc, limit=200)
            self.call_from_thread(self._got_log, proc, got)
        else:
            got = self.client.get("stack", proc=proc)
            text = got.get("stacks") or f"{got.get('error')}: {got.get('message')}"
            self.call_from_thread(self._got_stacks, proc, str(text))

    def _got_log(self, proc: str, got: Any, show: bool = True) -> None:
        self._log, self._log_of = got, proc
        if show:
            self._detail()

    def _got_stacks(self, proc: str, text: str) -> None:
        self._stacks[proc] = text
        self._detail()

    def _describe(self, p: dict[str, Any], a: dict[str, Any] | None) -> str:
        lines = [f"proc {p['mesh_name']} rank {p['rank']}", f"address {p['proc']}",
                 f"host {p['host']}  pid {p['pid']}  state {p['state']}",
                 f"cpu {p['cpu'] or 0}%  memory {_mib(p['rss'])}"]
        if p.get("cause"):
            lines.append(f"ended: {p['cause']}")
        if a is not None:
            lines += ["", f"actor {a['actor']}", f"class {a['class']}  state {a['state']}",
                      f"handled {a['handled']}  queue {a['queue']}  {a['rate']} msg/s"]
            if a.get("failure"):
                lines += ["failure:", a["failure"]]
        if p.get("last_failure"):
            lines += ["", f"last failure: {p['last_failure']}"]
        lines += ["", "last log lines:", *p.get("log_tail", [])]
        return "\n".join(lines)

    # -- keys -----------------------------------------------------------------------------------
    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        """Show the highlighted row's proc (fetching its log or stacks in those modes)."""
        proc = self._selected().get("proc")
        if proc is not None:
            addr = proc["proc"]
            if (self.mode == "stack" and addr not in self._stacks) or (
                    self.mode == "log" and self._log_of != addr):
                self._fetch_detail(self.mode, addr)
        self._detail()

    def action_filter(self) -> None:
        """Show the filter box."""
        box = self.query_one("#filter", Input)
        box.add_class("shown")
        box.focus()

    def action_clear_filter(self) -> None:
        """Clear the filter and go back to the tree."""
        box = self.query_one("#filter", Input)
        box.value = ""
        self.filter = ""
        box.remove_class("shown")
        self.query_one("#tree", DataTable).focus()
        self.refresh_data()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Apply the filter."""
        self.filter = event.value.strip()
        event.input.remove_class("shown")
        self.query_one("#tree", DataTable).focus()
        self.refresh_data()

    def action_show(self, mode: str) -> None:
        """Switch the right pane: details, log or stacks (fetched anew on each key)."""
        self.mode = mode
        proc = self._selected().get("proc")
        if mode in ("log", "stack") and proc is not None:
            self._stacks.pop(proc["proc"], None)
            self._fetch_detail(mode, proc["proc"])
        self._detail()


def run_top(url: str, token: str, interval: float = 1.0) -> int:
    """Run the terminal UI until ``q``."""
    TopApp(ApiClient(url, token), interval).run()
    return 0
