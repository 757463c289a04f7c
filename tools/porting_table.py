"""Write docs/porting.md and docs/configuration.md from the surface data and regency itself.

    .venv/bin/python tools/porting_table.py          # rewrite both pages
    .venv/bin/python tools/porting_table.py --check  # exit 1 if either is out of date

Each Monarch name gets a status: ``same`` (present, compatible, no note), ``better`` /
``different`` / ``not here`` (from tools/porting_notes.py), ``issue N`` (another open issue
lands it) or ``missing`` (listed, not built: a failing surface test says so too).
"""

from __future__ import annotations

import sys
from pathlib import Path

import surface_compare as sc
from porting_notes import NOTES

ROOT = Path(__file__).resolve().parent.parent
PORTING = ROOT / "docs" / "porting.md"
CONFIGURATION = ROOT / "docs" / "configuration.md"

PORTING_HEAD = """# Porting from Monarch

A Monarch 0.7.0 program ports by changing `monarch` to `regency` in its imports:

```python
from regency.actor import Actor, endpoint, this_host   # was: from monarch.actor import ...
from regency.config import configure                     # was: from monarch.config import ...
```

The tables below list every public name of `monarch`, `monarch.actor`,
`monarch.actor.concurrent`, `monarch.config`, `monarch.job`, `monarch.spmd` and `monarch.rdma`
in 0.7.0, with what it is in regency. They are generated (`tools/porting_table.py`) from the
list of Monarch's names kept in `tests/data/monarch_surface.json` and checked by the test
suite, so they stay true.

Status: **same** (present with a compatible signature), **better** (also does more),
**different** (present; how it differs is said), **not here** (calling it raises an error
that says why and what to use), **issue N** (lands with another open issue),
**missing** (not built yet).

Class members are listed where they are not simply the same.
"""


def _status(entry: sc.Entry) -> tuple[str, str]:
    note = NOTES.get(entry.ident)
    if entry.spec["kind"] == "broken":
        return "unimportable in the reference install", entry.spec.get("error", "")[:90]
    if entry.owner is not None and sc.check(entry):
        return entry.owner.split(" (")[0], ""
    if sc.check(entry):
        return "missing", "; ".join(sc.check(entry))
    return note if note else ("same", "")


def porting_page() -> str:
    """The text of docs/porting.md."""
    surface = sc.load_surface()
    out = [PORTING_HEAD]
    by_module: dict[str, list[sc.Entry]] = {}
    for entry in sc.entries(surface):
        by_module.setdefault(entry.module, []).append(entry)
    for module, items in by_module.items():
        target = surface["modules"][module]["regency_module"]
        out.append(f"\n## `{module}` → `{target}`\n")
        out.append("| name | status | how |\n|---|---|---|")
        for entry in items:
            status, how = _status(entry)
            if "." in entry.qualname and status == "same" and not how:
                continue
            if "." in entry.qualname and entry.owner is not None and module == "monarch":
                continue  # the tensor engine's hundreds of members: one line per class
            out.append(f"| `{entry.qualname}` | {status} | {how.replace('|', '/')} |")
    return "\n".join(out) + "\n"


CONFIG_HEAD = """# Configuration

`regency.config` accepts every configuration key of Monarch 0.7.0 beside its own. Set keys
with `configure(key=value)` (or `with configured(...)` for a block); read them with
`get_global_config()`. A key's value comes from, in this order: `configure()`; the
environment variable `REGENCY_<KEY>` (the key in upper case; for a Monarch key that is another
name for a regency key, that key's variable too, the regency name winning); the default.
Durations are seconds; `"30s"`, `"500ms"`, `"2m"`, `"1h 30m"` are read too. An unknown key
raises `ConfigKeyError` (a `KeyError` and a `ValueError`) naming the nearest key; a value a
key cannot take raises `ConfigValueError`. Every `REGENCY_<KEY>` set in the environment is
read when the controller's runtime starts (its first regency call) and when `regency
worker` starts, so a bad one stops them there, naming the variable.

Generated from `regency/_config_keys.py` by `tools/porting_table.py`.

| key | kind | default | what it does here |
|---|---|---|---|
"""


def configuration_page() -> str:
    """The text of docs/configuration.md."""
    from regency.config import describe

    rows = [f"| `{k.name}` | {k.kind} | `{k.default!r}` | {k.doc.replace('|', '/')} |"
            for k in describe().values()]
    return CONFIG_HEAD + "\n".join(rows) + "\n"


def main(argv: list[str]) -> int:
    """Rewrite the pages, or with ``--check`` report which are stale."""
    pages = {PORTING: porting_page(), CONFIGURATION: configuration_page()}
    stale = [p for p, text in pages.items() if not p.exists() or p.read_text() != text]
    if "--check" in argv:
        for path in stale:
            print(f"{path.relative_to(ROOT)} is out of date: run tools/porting_table.py")
        return 1 if stale else 0
    for path in stale:
        path.write_text(pages[path])
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
