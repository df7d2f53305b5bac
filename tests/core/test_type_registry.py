"""Finding 2: stored data rebuilds only registered types; nothing it names is imported.

Every type here is declared but never encoded in this module's tests before the
assertion, so only the registration path under test can make it decodable.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pydantic
import pytest

import perdure
from perdure import _type_registry as type_registry
from perdure._errors import ConfigurationError, SerializationError
from perdure._serialization import TAG, from_jsonable


@dataclasses.dataclass
class Invoice:
    number: int
    lines: list[Line]


@dataclasses.dataclass
class Line:
    sku: str
    secret_flag: bool = dataclasses.field(default=False, init=False)


class Receipt(pydantic.BaseModel):
    total: int


@dataclasses.dataclass
class Explicit:
    x: int


@dataclasses.dataclass
class NeverDeclared:
    x: int


@perdure.workflow
async def billing(invoice: Invoice) -> Receipt:
    return Receipt(total=len(invoice.lines))


def _tagged(tp: type, fields: dict[str, object], tag: str = "dataclass") -> dict[str, object]:
    return {TAG: tag, "t": type_registry.type_path(tp), "v": fields}


def test_a_hostile_row_naming_a_module_imports_nothing_and_builds_nothing(tmp_path: Path) -> None:
    # The audit's row: importing venv.__main__ creates a virtualenv and raises SystemExit.
    code = textwrap.dedent(
        """
        import sys
        from perdure._errors import SerializationError
        from perdure._serialization import from_jsonable
        try:
            from_jsonable({"__perdure__": "dataclass", "t": "venv.__main__:X", "v": {}})
        except SerializationError as exc:
            print("typed:", exc)
        print("imported:", "venv" in sys.modules)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout
    assert "typed:" in out and "is not registered" in out
    assert "imported: False" in out
    assert list(tmp_path.iterdir()) == []


def test_types_a_workflow_declares_are_rebuilt_with_the_types_of_their_fields() -> None:
    value = from_jsonable(_tagged(Invoice, {"number": 7, "lines": [_tagged(Line, {"sku": "a"})]}))
    assert value == Invoice(7, [Line("a")])
    assert type(value.lines[0]) is Line
    assert from_jsonable(_tagged(Receipt, {"total": 3}, "pydantic")) == Receipt(total=3)


def test_register_type_makes_a_type_rebuildable() -> None:
    with pytest.raises(SerializationError, match="is not registered"):
        from_jsonable(_tagged(Explicit, {"x": 1}))
    perdure.register_type(Explicit)
    assert from_jsonable(_tagged(Explicit, {"x": 1})) == Explicit(1)


def test_only_declared_fields_are_set() -> None:
    with pytest.raises(SerializationError, match=r"__class__.*does not declare"):
        from_jsonable(_tagged(Line, {"sku": "a", "__class__": "x"}))
    with pytest.raises(SerializationError, match=r"\['extra'\]"):
        from_jsonable(_tagged(Line, {"sku": "a", "extra": 1}))
    # A field declared with init=False is declared: it is set back.
    line = from_jsonable(_tagged(Line, {"sku": "a", "secret_flag": True}))
    assert line.secret_flag is True


@pytest.mark.parametrize(
    "row",
    [
        {TAG: "dataclass", "t": 5, "v": {}},
        {TAG: "dataclass", "v": {}},
        {TAG: "dataclass", "t": type_registry.type_path(Line), "v": [1]},
        {TAG: "pydantic", "t": None, "v": {}},
    ],
    ids=repr,
)
def test_malformed_type_tags_are_typed_errors(row: dict[str, object]) -> None:
    type_registry.register_type(Line)
    with pytest.raises(SerializationError):
        from_jsonable(row)


def _allow_list_subprocess(tmp_path: Path, env_types: str | None, pyproject: str | None) -> str:
    (tmp_path / "shop_types.py").write_text(
        "import dataclasses\n\n@dataclasses.dataclass\nclass Order:\n    id: int\n"
    )
    if pyproject is not None:
        (tmp_path / "pyproject.toml").write_text(pyproject)
    code = textwrap.dedent(
        """
        import sys
        from perdure._serialization import from_jsonable
        from perdure._errors import SerializationError
        try:
            row = {"__perdure__": "dataclass", "t": "shop_types:Order", "v": {"id": 4}}
            print(from_jsonable(row))
        except SerializationError as exc:
            print("refused", exc)
        try:
            from_jsonable({"__perdure__": "dataclass", "t": "json:JSONDecoder", "v": {}})
        except SerializationError:
            print("json refused")
        """
    )
    env = {k: v for k, v in os.environ.items() if k != type_registry.TYPES_ENV}
    env["PYTHONPATH"] = str(tmp_path)
    if env_types is not None:
        env[type_registry.TYPES_ENV] = env_types
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_the_allow_list_from_the_environment_imports_only_what_it_names(tmp_path: Path) -> None:
    out = _allow_list_subprocess(tmp_path, "shop_types:Order", None)
    assert "Order(id=4)" in out and "json refused" in out
    out = _allow_list_subprocess(tmp_path, "shop_types:*", None)
    assert "Order(id=4)" in out


def test_the_allow_list_from_pyproject(tmp_path: Path) -> None:
    out = _allow_list_subprocess(tmp_path, None, '[tool.perdure]\ntypes = ["shop_types:Order"]\n')
    assert "Order(id=4)" in out and "json refused" in out


def test_without_an_allow_list_entry_the_module_is_not_imported(tmp_path: Path) -> None:
    out = _allow_list_subprocess(tmp_path, None, None)
    assert "refused" in out and "is not registered" in out


def test_a_malformed_allow_list_entry_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="module:qualname"):
        perdure.allow_types("no_colon")
    assert NeverDeclared(1).x == 1  # declared here only to show it stays unregistered
    with pytest.raises(SerializationError, match="is not registered"):
        from_jsonable(_tagged(NeverDeclared, {"x": 1}))
