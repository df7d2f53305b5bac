"""Finding 2's last gap: a locator read from stored data never imports a module.

``perdure._locate.resolve`` looks only in modules the user chose (a worker's modules,
objects this process located, ``allow_module``, ``PERDURE_LOCATORS``); a hostile row
naming any other module gets a typed error and nothing is imported.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from perdure import _locate as locate
from perdure._errors import ConfigurationError

CANARY = """
from pathlib import Path
Path(__file__).with_suffix(".imported").write_text("ran")
target = object()
"""


@pytest.fixture
def canary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A module that leaves a file behind when it is imported."""
    (tmp_path / "perdure_canary_mod.py").write_text(CANARY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("PERDURE_LOCATORS", raising=False)
    monkeypatch.setattr(locate, "_allowed", set())
    yield tmp_path / "perdure_canary_mod.imported"
    sys.modules.pop("perdure_canary_mod", None)


def test_a_stored_locator_never_imports_its_module(canary: Path) -> None:
    with pytest.raises(ConfigurationError, match="not told to import"):
        locate.resolve("perdure_canary_mod:target", what="agent")
    assert not canary.exists()
    assert "perdure_canary_mod" not in sys.modules


def test_a_stored_locator_may_not_name_an_already_imported_module_nobody_chose(
    canary: Path,
) -> None:
    assert "os" in sys.modules
    with pytest.raises(ConfigurationError, match="not told to import"):
        locate.resolve("os:system", what="graph")


def test_modules_the_user_chose_resolve(canary: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERDURE_LOCATORS", "perdure_canary_mod")
    found = locate.resolve("perdure_canary_mod:target", what="agent")
    assert canary.exists()  # configured by the user: imported
    assert found is sys.modules["perdure_canary_mod"].target
    monkeypatch.delenv("PERDURE_LOCATORS")
    locate.allow_module("perdure_canary_mod")
    assert locate.resolve("perdure_canary_mod:target") is found
    with pytest.raises(ConfigurationError, match="private attribute"):
        locate.resolve("perdure_canary_mod:__dict__")


def test_a_locator_given_in_code_is_imported_and_allowed(canary: Path) -> None:
    found = locate.resolve("perdure_canary_mod:target", given=True)
    assert canary.exists()
    assert locate.resolve("perdure_canary_mod:target") is found
