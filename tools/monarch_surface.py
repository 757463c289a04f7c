"""List Monarch's public surface as data: every public name, each class's members, signatures.

Run it with the Python of an environment where torchmonarch is installed::

    /work/main/.bench-venvs/monarch/bin/python tools/monarch_surface.py \
        > tests/data/monarch_surface.json

For each module below it records the names in ``__all__`` (plus the few names programs reach
without importing them, such as ``Instance`` from ``context().actor_instance``), what kind of
object each is, its signature where Python can read one, and for classes every public member.
Names that another open issue owns carry that issue in ``owner``; the surface test marks them
``xfail`` instead of failing. Nothing here imports regency: this script only reads Monarch.
"""

from __future__ import annotations

import importlib
import inspect
import json
import sys
import warnings
from typing import Any

MODULES: dict[str, str] = {
    "monarch": "regency",
    "monarch.actor": "regency.actor",
    "monarch.actor.concurrent": "regency.actor.concurrent",
    "monarch.config": "regency.config",
    "monarch.job": "regency.job",
    "monarch.spmd": "regency.spmd",
    "monarch.rdma": "regency.rdma",
}

# Names a program reaches without importing them from the module: (module, name) -> where from.
REACHABLE: dict[tuple[str, str], str] = {
    ("monarch.actor", "Instance"): "monarch._src.actor.actor_mesh:Instance",
    ("monarch.actor", "ActorMesh"): "monarch._src.actor.actor_mesh:ActorMesh",
    ("monarch.config", "ChannelTransport"): "monarch.config:ChannelTransport",
}

# Classes whose constructor only Monarch itself calls (users get instances from the runtime):
# their constructor signature is not part of the surface.
INTERNAL_CONSTRUCTORS = {
    "ActorMesh", "Context", "Endpoint", "Future", "HostMesh", "Instance", "MeshFailure",
    "Port", "PortReceiver", "ProcMesh", "Actor", "ChannelTransport", "Uid", "Encoding",
}

ISSUE_13 = "issue 13 (tensor engine)"
ISSUE_15 = "issue 15 (debugging)"
ISSUE_16 = "issue 16 (introspection)"
ISSUE_17 = "issue 17 (jobs)"
BEHAVIOUR = "issue 18 part 4 (behaviour work)"

_MONARCH_OURS = {
    "Extent", "Shape", "NDSlice", "Selection", "clear_runtime_config", "configure",
    "configured", "get_global_config", "get_runtime_config", "mast_reserve",
}

# (module, name) or (module, "Class.member") -> owner. Anything not listed is this issue's.
OWNERS: dict[tuple[str, str], str] = {
    ("monarch.actor", "ProcMesh.to_table"): ISSUE_13,
    ("monarch.actor", "Instance.spawn_tensor_engine"): ISSUE_13,
}


def owner_of(module: str, qualname: str) -> str | None:
    """Which other issue owns ``qualname`` of ``module`` (None: this issue)."""
    if module in ("monarch.job", "monarch.spmd"):
        return ISSUE_17
    if module == "monarch" and qualname.split(".")[0] not in _MONARCH_OURS:
        return ISSUE_13
    return OWNERS.get((module, qualname))


def describe_signature(obj: Any, drop_self: bool) -> dict[str, Any] | None:
    """Parameters as ``[name, kind, has_default]`` triples and the text, or None if unreadable."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    params = list(sig.parameters.values())
    if drop_self and params and params[0].name in ("self", "cls"):
        params = params[1:]
    return {
        "params": [[p.name, p.kind.name, p.default is not p.empty] for p in params],
        "text": str(sig.replace(parameters=params, return_annotation=sig.empty)),
    }


def raw_attr(cls: type, name: str) -> Any:
    """The attribute as stored in the class dictionary (before descriptors run)."""
    for klass in cls.__mro__:
        if name in vars(klass):
            return vars(klass)[name]
    return getattr(cls, name)


def describe_member(cls: type, name: str) -> dict[str, Any]:
    """Kind and signature of one public member of ``cls``."""
    raw = raw_attr(cls, name)
    if isinstance(raw, property) or type(raw).__name__ == "getset_descriptor":
        return {"kind": "property", "signature": None}
    if isinstance(raw, classmethod):
        return {"kind": "classmethod", "signature": describe_signature(getattr(cls, name), False)}
    if isinstance(raw, staticmethod):
        return {"kind": "staticmethod", "signature": describe_signature(getattr(cls, name), False)}
    if callable(raw) and not inspect.isclass(raw):
        bound = type(raw).__name__ in ("builtin_function_or_method",)
        kind = "classmethod" if bound else "method"
        return {"kind": kind, "signature": describe_signature(raw, not bound)}
    if inspect.isclass(raw):
        return {"kind": "class", "signature": None}
    return {"kind": "attribute", "signature": None}


def public_members(cls: type) -> list[str]:
    """Public names a user sees on ``cls``, Python's ``object`` and exceptions' own left out."""
    base: set[str] = set(dir(BaseException)) if issubclass(cls, BaseException) else set()
    return sorted(n for n in dir(cls) if not n.startswith("_") and n not in base)


def describe_name(module: str, name: str, obj: Any) -> dict[str, Any]:
    """One public name: kind, signature, and for a class its members."""
    entry: dict[str, Any] = {"owner": owner_of(module, name)}
    if inspect.ismodule(obj):
        entry.update(kind="module", signature=None)
    elif inspect.isclass(obj):
        internal = name in INTERNAL_CONSTRUCTORS
        sig = None if internal else describe_signature(obj, False)
        entry.update(kind="class", signature=sig, internal_constructor=internal)
        entry["members"] = {}
        for member in public_members(obj):
            info = describe_member(obj, member)
            info["owner"] = owner_of(module, f"{name}.{member}")
            entry["members"][member] = info
    elif callable(obj):
        entry.update(kind="function", signature=describe_signature(obj, False))
    else:
        entry.update(kind="value", signature=None, type=type(obj).__name__)
    return entry


def load(spec: str) -> Any:
    """``module:attr`` to the object."""
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)


def describe_module(module: str) -> dict[str, Any]:
    """Every public name of one Monarch module."""
    mod = importlib.import_module(module)
    names: dict[str, Any] = {}
    for name in sorted(mod.__all__):
        try:
            obj = getattr(mod, name)
        except Exception as exc:  # lazy imports that are broken in the release itself
            names[name] = {
                "owner": owner_of(module, name),
                "kind": "broken",
                "signature": None,
                "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}",
            }
            continue
        names[name] = describe_name(module, name, obj)
    for (where, name), spec in REACHABLE.items():
        if where == module:
            names[name] = describe_name(module, name, load(spec))
            names[name]["reachable_only"] = spec
    return {"regency_module": MODULES[module], "names": names}


def config_keys() -> dict[str, dict[str, str]]:
    """Every configuration key ``monarch.config.get_global_config()`` knows: type and default."""
    config = importlib.import_module("monarch.config")
    keys: dict[str, dict[str, str]] = {}
    for key, value in sorted(config.get_global_config().items()):
        keys[key] = {"type": type(value).__name__, "default": str(value)}
    return keys


def main() -> int:
    """Write the surface of every module in MODULES as JSON on stdout."""
    warnings.simplefilter("ignore")
    version = importlib.import_module("importlib.metadata").version("torchmonarch")
    data = {
        "generated_by": "tools/monarch_surface.py",
        "monarch_version": version,
        "modules": {module: describe_module(module) for module in MODULES},
        "config_keys": config_keys(),
    }
    json.dump(data, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
