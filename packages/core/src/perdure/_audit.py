"""The tool inventory behind ``perdure audit``: every tool and node an agent or graph can
run, with the perdure policy it is declared with and what that means after a crash.

Core knows no framework. Adapters register an *inspector* under the entry-point group
``perdure.audit`` (or with ``register_inspector``): ``inspect(obj, audit) -> bool``
claims the objects of its framework, reports their tools with ``audit.add`` and hands
what they reach (agents, subgraphs) back to ``audit.visit``. The marks read here are
perdure's own: ``@perdure.step`` / ``@perdure.effect`` leave ``__perdure_step__`` on the
function. ``[tool.perdure.tools]`` in ``pyproject.toml`` declares tools the user does not
own. Nothing is ever guessed safe: what carries no declaration is ``undeclared``.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import CodeType, ModuleType
from typing import Any, Literal, cast

from perdure._context import StepSpec
from perdure._errors import ConfigurationError

__all__ = [
    "Audit",
    "Entry",
    "Inspector",
    "Policy",
    "audit_objects",
    "calls_of",
    "declaration_of",
    "load_declarations",
    "policy_of",
    "register_inspector",
    "where",
]

#: ``step``: a recorded step (read-only or pure; replayed once completed). ``effect``:
#: intent recorded before the call, an unknown outcome parks the run. ``effect-idempotent``:
#: an effect whose receiver dedupes on the idempotency key, retried with the same key.
#: ``delegates``: a node not declared itself that calls declared steps. ``container``:
#: a handoff, agent-as-tool or subgraph, whose own tools are listed separately.
Policy = Literal["step", "effect", "effect-idempotent", "delegates", "container", "undeclared"]

#: Values accepted in ``[tool.perdure.tools]``.
CONFIG_POLICIES: dict[str, Policy] = {
    "read-only": "step",
    "pure": "step",
    "step": "step",
    "effect": "effect",
    "effect-idempotent": "effect-idempotent",
    "idempotent": "effect-idempotent",
}

_MEANING: dict[Policy, str] = {
    "step": "recorded step: replayed, not called again, once it completed",
    "effect": "effect: intent recorded before the call; a crash mid-call parks the run "
    "for reconcile instead of calling again",
    "effect-idempotent": "effect: a crash mid-call retries it with the same idempotency "
    "key (the receiver dedupes)",
    "delegates": "not declared itself; its calls to declared steps are recorded, anything "
    "else it does runs again if a crash interrupts it",
    "container": "",
    "undeclared": "undeclared: may have side effects",
}


@dataclass(frozen=True)
class Entry:
    """One tool, node or server an agent or graph can run."""

    owner: str
    kind: str
    name: str
    policy: Policy
    #: The name ``[tool.perdure.tools]`` declares it under (``mcp:SERVER.TOOL`` for MCP).
    key: str = ""
    defined_in: str | None = None
    location: str | None = None
    declared_by: str | None = None
    #: ``always``, ``conditional`` (a function decides) or None.
    approval: str | None = None
    calls: tuple[str, ...] = ()
    #: What the adapter knows about how the framework runs it (appended to the finding).
    note: str = ""

    @property
    def finding(self) -> str:
        parts = [_MEANING[self.policy]]
        if self.calls:
            parts.append("calls " + ", ".join(self.calls))
        if self.note:
            parts.append(self.note)
        if self.approval:
            parts.append(f"approval required ({self.approval})")
        return "; ".join(p for p in parts if p)

    def as_json(self) -> dict[str, Any]:
        return {
            "owner": self.owner,
            "kind": self.kind,
            "name": self.name,
            "key": self.key or self.name,
            "policy": self.policy,
            "declared_by": self.declared_by,
            "approval": self.approval,
            "defined_in": self.defined_in,
            "location": self.location,
            "calls": list(self.calls),
            "finding": self.finding,
        }


#: ``inspect(obj, audit)``: True when ``obj`` is of the inspector's framework (reported).
Inspector = Callable[[Any, "Audit"], bool]

_inspectors: dict[str, Inspector] = {}
_loaded = False


def register_inspector(name: str, inspector: Inspector) -> None:
    """Make ``audit`` ask ``inspector`` about every object it reaches."""
    _inspectors[name] = inspector


def _all_inspectors() -> list[Inspector]:
    global _loaded
    if not _loaded:
        for ep in importlib.metadata.entry_points(group="perdure.audit"):
            if ep.name in _inspectors:
                continue
            try:
                _inspectors[ep.name] = ep.load()
            except ImportError:
                continue  # the adapter's framework is not installed: nothing of it to find
        _loaded = True
    return list(_inspectors.values())


def declaration_of(fn: Any) -> StepSpec | None:
    """The ``@perdure.step`` / ``@perdure.effect`` spec on ``fn`` or what it wraps."""
    seen = 0
    while fn is not None and seen < 20:
        spec = getattr(fn, "__perdure_step__", None)
        if isinstance(spec, StepSpec):
            return spec
        fn = getattr(fn, "__wrapped__", None)
        seen += 1
    return None


def policy_of(spec: StepSpec) -> Policy:
    if spec.kind == "effect":
        return "effect-idempotent" if spec.idempotent_receiver else "effect"
    return "step"


def where(fn: Any) -> tuple[str | None, str | None]:
    """``(module:qualname, file:line)`` of the function ``fn`` is (or wraps)."""
    try:
        target = inspect.unwrap(fn)
    except ValueError:
        target = fn
    module = getattr(target, "__module__", None)
    qualname = getattr(target, "__qualname__", None)
    defined = f"{module}:{qualname}" if module and qualname else None
    code = getattr(target, "__code__", None)
    if not isinstance(code, CodeType):
        return defined, None
    return defined, f"{code.co_filename}:{code.co_firstlineno}"


def _names(code: CodeType) -> Iterable[str]:
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from _names(const)


def calls_of(fn: Any) -> tuple[str, ...]:
    """The declared perdure steps ``fn``'s code refers to by a global name, each as
    ``name (policy)``: what can be told without running it."""
    target = inspect.unwrap(fn) if callable(fn) else fn
    code = getattr(target, "__code__", None)
    scope = getattr(target, "__globals__", None)
    if not isinstance(code, CodeType) or not isinstance(scope, dict):
        return ()
    found: dict[str, str] = {}
    for name in _names(code):
        value = cast(dict[str, Any], scope).get(name)
        spec = None if value is None or value is target else declaration_of(value)
        if spec is not None:
            found.setdefault(name, f"{name} ({policy_of(spec)})")
    return tuple(found.values())


def perdure_table(start: Path, name: str) -> tuple[Path, dict[str, Any]] | None:
    """``[tool.perdure.NAME]`` of the nearest ``pyproject.toml`` above ``start`` that has
    one, with that file's path; None if none has it."""
    for folder in (start, *start.parents):
        path = folder / "pyproject.toml"
        if not path.is_file():
            continue
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigurationError(f"{path}: cannot read [tool.perdure.{name}]: {exc}") from exc
        table: Any = data.get("tool", {}).get("perdure", {}).get(name)
        if table is None:
            continue
        if not isinstance(table, dict):
            raise ConfigurationError(f"{path}: [tool.perdure.{name}] must be a table")
        return path, cast(dict[str, Any], table)
    return None


def load_declarations(start: Path) -> tuple[Path | None, dict[str, Policy]]:
    """``[tool.perdure.tools]`` of the nearest ``pyproject.toml`` above ``start``."""
    found = perdure_table(start, "tools")
    if found is None:
        return None, {}
    path, table = found
    declared: dict[str, Policy] = {}
    for key, value in table.items():
        policy = CONFIG_POLICIES.get(value) if isinstance(value, str) else None
        if policy is None:
            raise ConfigurationError(
                f"{path}: [tool.perdure.tools] {key!r} = {value!r}: expected one of "
                + ", ".join(repr(v) for v in CONFIG_POLICIES)
            )
        declared[key] = policy
    return path, declared


@dataclass
class Audit:
    """Walks objects, asking each inspector about them; collects the entries."""

    declarations: Mapping[str, Policy] = field(default_factory=lambda: {})
    entries: list[Entry] = field(default_factory=lambda: [])
    _seen: set[int] = field(default_factory=lambda: set())
    _keep: list[Any] = field(default_factory=lambda: [])
    _used: set[str] = field(default_factory=lambda: set())
    #: Declaration keys that name an entry, whether or not it needed the declaration.
    _matched: set[str] = field(default_factory=lambda: set())

    def visit(self, obj: Any) -> bool:
        """Report ``obj`` if an inspector knows it (each object once); True if one did."""
        if id(obj) in self._seen:
            return True
        for inspector in _all_inspectors():
            self._seen.add(id(obj))
            self._keep.append(obj)  # ids stay unique while the walk lasts
            if inspector(obj, self):
                return True
            self._seen.discard(id(obj))
        return False

    def add(self, entry: Entry) -> None:
        """Record ``entry``; an undeclared one takes its ``[tool.perdure.tools]`` policy."""
        key = entry.key or entry.name
        entry = replace(entry, key=key)
        names = [f"{entry.owner}.{entry.name}", key]
        if key.startswith("mcp:") and "." in key:
            names.append(key.partition(".")[0])  # the whole server declared
        self._matched.update(n for n in names if n in self.declarations)
        if entry.policy in ("undeclared", "delegates"):
            for name in names:
                policy = self.declarations.get(name)
                if policy is not None:
                    self._used.add(name)
                    entry = replace(entry, policy=policy, declared_by="[tool.perdure.tools]")
                    break
        self.entries.append(entry)

    def declared_under(self, prefix: str) -> list[tuple[str, Policy]]:
        """``[tool.perdure.tools]`` keys starting with ``prefix`` (e.g. ``mcp:fs.``)."""
        return [(k, v) for k, v in self.declarations.items() if k.startswith(prefix)]

    def unmatched(self) -> list[str]:
        """``[tool.perdure.tools]`` keys that name no tool, node or server audited: a
        typo, or a tool that was renamed or removed (its new name is then undeclared)."""
        return [k for k in self.declarations if k not in self._matched]

    def gating(self) -> list[Entry]:
        """Entries ``--strict`` fails on: undeclared ones."""
        return [e for e in self.entries if e.policy == "undeclared"]


def audit_objects(objects: Iterable[Any], declarations: Mapping[str, Policy]) -> Audit:
    """Audit ``objects``; a module stands for every attribute it has."""
    audit = Audit(declarations)
    for obj in objects:
        if isinstance(obj, ModuleType):
            for attr, value in list(vars(obj).items()):
                if not attr.startswith("__") and not isinstance(value, ModuleType):
                    audit.visit(value)
        elif not audit.visit(obj):
            raise ConfigurationError(
                f"{obj!r} is neither an agent nor a compiled graph perdure can audit "
                f"(inspectors: {', '.join(sorted(_inspectors)) or 'none installed'})"
            )
    return audit
