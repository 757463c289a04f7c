"""Compare regency's modules with the Monarch surface kept in tests/data/monarch_surface.json.

Run with regency's Python to print the figures (present with a compatible signature / listed,
per module)::

    .venv/bin/python tools/surface_compare.py            # figures
    .venv/bin/python tools/surface_compare.py --missing  # and every entry that is not there yet

*Compatible* means every call Monarch accepts, regency accepts with the same meaning:

* each parameter Monarch takes by position is taken at the same position (and, if Monarch also
  takes it by keyword, under the same name); each keyword-only parameter under the same name;
  ``*args`` / ``**kwargs`` where Monarch has them; a parameter regency collects with ``*args``
  or ``**kwargs`` counts as taken;
* every parameter regency requires, Monarch requires too (extra optional parameters are fine);
* a property stays an attribute (not a method), a method stays callable, a class- or static
  method stays callable on the class.

Monarch parameters whose names begin with ``_`` are private and not compared. Where Python
cannot read a signature on either side, the name only has to exist.
"""

from __future__ import annotations

import importlib
import inspect
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "monarch_surface.json"

POSITIONAL = ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")


@dataclass(frozen=True)
class Entry:
    """One thing to check: a module-level name or a class member."""

    module: str  # the Monarch module
    target: str  # the regency module
    qualname: str  # "Name" or "Class.member"
    spec: dict[str, Any]

    @property
    def owner(self) -> str | None:
        """Which other issue lands this entry (None: issue 18)."""
        owner: str | None = self.spec.get("owner")
        return owner

    @property
    def ident(self) -> str:
        """``monarch.actor:ProcMesh.spawn`` style name for test ids and reports."""
        return f"{self.module}:{self.qualname}"


def load_surface(path: Path = DATA) -> dict[str, Any]:
    """The stored surface."""
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def entries(surface: dict[str, Any]) -> list[Entry]:
    """Every name and class member of every module, in a stable order."""
    out: list[Entry] = []
    for module, info in sorted(surface["modules"].items()):
        target = info["regency_module"]
        for name, spec in sorted(info["names"].items()):
            out.append(Entry(module, target, name, spec))
            for member, mspec in sorted(spec.get("members", {}).items()):
                out.append(Entry(module, target, f"{name}.{member}", mspec))
    return out


class _Params:
    """A regency signature in the shape the rules need."""

    def __init__(self, sig: inspect.Signature) -> None:
        params = list(sig.parameters.values())
        self.positional = [p for p in params if p.kind.name in POSITIONAL]
        self.keywords = {p.name for p in params if p.kind.name in ("POSITIONAL_OR_KEYWORD",
                                                                    "KEYWORD_ONLY")}
        self.varargs = any(p.kind is p.VAR_POSITIONAL for p in params)
        self.varkw = any(p.kind is p.VAR_KEYWORD for p in params)
        self.required_kwonly = {p.name for p in params
                                if p.kind is p.KEYWORD_ONLY and p.default is p.empty}


def _compare(monarch: list[list[Any]], ours: _Params) -> list[str]:
    """Why a Monarch call form would fail against ``ours`` (empty: compatible)."""
    problems: list[str] = []
    m_pos = [p for p in monarch if p[1] in POSITIONAL]
    for index, (name, kind, _has_default) in enumerate(m_pos):
        if name.startswith("_"):
            continue
        if index < len(ours.positional):
            if kind == "POSITIONAL_OR_KEYWORD" and ours.positional[index].name != name:
                problems.append(f"position {index} is {ours.positional[index].name!r}, "
                                f"Monarch's is {name!r}")
        elif not ours.varargs:
            problems.append(f"no positional parameter {index} ({name!r})")
        if kind == "POSITIONAL_OR_KEYWORD" and name not in ours.keywords and not ours.varkw:
            problems.append(f"{name!r} not accepted by keyword")
    for name, kind, _has_default in monarch:
        if kind == "KEYWORD_ONLY" and name not in ours.keywords and not ours.varkw:
            problems.append(f"keyword {name!r} not accepted")
        if kind == "VAR_POSITIONAL" and not ours.varargs:
            problems.append("*args not accepted")
        if kind == "VAR_KEYWORD" and not ours.varkw:
            problems.append("**kwargs not accepted")
    m_required = {p[0] for p in monarch if not p[2] and p[1] not in ("VAR_POSITIONAL",
                                                                     "VAR_KEYWORD")}
    for index, param in enumerate(ours.positional):
        required_there = index < len(m_pos) and not m_pos[index][2]
        if param.default is param.empty and not required_there and param.name not in m_required:
            problems.append(f"requires {param.name!r}, which Monarch does not")
    for name in sorted(ours.required_kwonly - m_required):
        problems.append(f"requires keyword {name!r}, which Monarch does not")
    return problems


def _signature(obj: Any, drop_first: bool) -> inspect.Signature | None:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    params = list(sig.parameters.values())
    if drop_first and params:
        params = params[1:]
    return sig.replace(parameters=params)


def _raw_member(cls: type, name: str) -> Any:
    for klass in cls.__mro__:
        if name in vars(klass):
            return vars(klass)[name]
    return None


def _declared(cls: type, name: str) -> bool:
    """Whether instances of ``cls`` have ``name`` as a plain attribute (annotated or slotted)."""
    for klass in cls.__mro__:
        if name in getattr(klass, "__annotations__", {}):
            return True
        if name in getattr(klass, "__slots__", ()):
            return True
    return False


def resolve(target: str, qualname: str) -> tuple[bool, Any, str]:
    """Find ``qualname`` in regency module ``target``: (found, object-or-raw-member, kind)."""
    try:
        mod = importlib.import_module(target)
    except ImportError:
        return False, None, "module missing"
    head, _, member = qualname.partition(".")
    if target == "regency" and head in getattr(mod, "_TENSOR_NAMES", ()):
        # loaded on first access and only with torch: present, not imported here, so that
        # the figures are the same with or without torch installed
        return True, None, "lazy"
    if not hasattr(mod, head):
        return False, None, "missing"
    obj = getattr(mod, head)
    if not member:
        return True, obj, "name"
    if not inspect.isclass(obj):
        return (hasattr(obj, member), getattr(obj, member, None), "attribute")
    raw = _raw_member(obj, member)
    if raw is None:
        return _declared(obj, member), None, "attribute"
    return True, raw, "member"


def check(entry: Entry) -> list[str]:
    """Problems with ``entry`` in regency (empty: present and compatible)."""
    found, obj, how = resolve(entry.target, entry.qualname)
    if not found:
        return [f"{entry.target}.{entry.qualname}: {how}"]
    if how == "lazy":
        return []  # a tensor-engine name: its signature is checked only where torch is
    spec = entry.spec
    kind = spec["kind"]
    member = "." in entry.qualname
    if kind in ("property", "attribute"):
        if inspect.isfunction(obj):
            return ["Monarch has a property here, regency a method"]
        return []
    sig_spec = spec.get("signature")
    if kind == "class" and spec.get("internal_constructor"):
        return [] if inspect.isclass(obj) else ["Monarch has a class here"]
    if kind in ("method", "classmethod", "staticmethod", "function", "class"):
        if member and isinstance(obj, property):
            return [f"Monarch has a {kind} here, regency a property"]
        if member and kind in ("classmethod", "staticmethod") and not isinstance(
            obj, (classmethod, staticmethod)
        ):
            return [f"Monarch has a {kind} here, regency an instance method"]
        func = obj.__func__ if isinstance(obj, (classmethod, staticmethod)) else obj
        if not callable(func):
            return [f"Monarch has a callable {kind} here"]
        if sig_spec is None:
            return []
        drop = member and not isinstance(obj, staticmethod) and not inspect.isclass(func)
        ours = _signature(func, drop)
        if ours is None:
            return []
        return _compare(sig_spec["params"], _Params(ours))
    return []


def figures(surface: dict[str, Any]) -> dict[str, dict[str, list[int]]]:
    """Per module: [ok, listed] for names, members, and this issue's entries only."""
    table: dict[str, dict[str, list[int]]] = {}
    for entry in entries(surface):
        if entry.spec["kind"] == "broken":
            continue
        row = table.setdefault(entry.module, {"names": [0, 0], "members": [0, 0],
                                              "issue 18": [0, 0]})
        ok = not check(entry)
        buckets = ["members" if "." in entry.qualname else "names"]
        if entry.owner is None:
            buckets.append("issue 18")
        for bucket in buckets:
            row[bucket][0] += ok
            row[bucket][1] += 1
    return table


def main(argv: list[str]) -> int:
    """Print the figures, and with ``--missing`` every entry that fails its check."""
    surface = load_surface()
    print(f"Monarch {surface['monarch_version']} surface vs regency "
          "(present with a compatible signature / listed)")
    print(f"{'module':26} {'names':>9} {'members':>9} {'issue 18 own':>13}")
    total = {"names": [0, 0], "members": [0, 0], "issue 18": [0, 0]}
    for module, row in sorted(figures(surface).items()):
        cells = []
        for key in ("names", "members", "issue 18"):
            total[key][0] += row[key][0]
            total[key][1] += row[key][1]
            cells.append(f"{row[key][0]}/{row[key][1]}")
        print(f"{module:26} {cells[0]:>9} {cells[1]:>9} {cells[2]:>13}")
    cells = [f"{total[k][0]}/{total[k][1]}" for k in ("names", "members", "issue 18")]
    print(f"{'all':26} {cells[0]:>9} {cells[1]:>9} {cells[2]:>13}")
    broken = [e.ident for e in entries(surface) if e.spec["kind"] == "broken"]
    if broken:
        print("not counted (fail to import from the reference install: broken lazy imports, "
              f"or a torch build mismatch): {', '.join(broken)}")
    if "--missing" in argv:
        for entry in entries(surface):
            problems = [] if entry.spec["kind"] == "broken" else check(entry)
            if problems:
                owner = entry.owner or "issue 18"
                print(f"  {entry.ident} [{owner}]: {'; '.join(problems)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
