"""Which backend a URL names (``perdure._config``, ``perdure._registry``) and the workflow
registry: precedence, and clear ``ConfigurationError``s for what we cannot open."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import engine_workflows as ew
import pytest

import perdure
from perdure._config import DEFAULT_URL, resolve_url
from perdure._engine.backend import EmbeddedBackend
from perdure._errors import ConfigurationError, WorkflowNotFoundError
from perdure._registry import open_backend, register_backend, schemes
from perdure._stores.memory import MemoryStore
from perdure._workflow import get_workflow

_unique = itertools.count()


def fresh_scheme() -> str:
    return f"memtest{next(_unique)}"


def write_pyproject(folder: Path, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "pyproject.toml"
    path.write_text(body, encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("PERDURE_URL", raising=False)
    ew.reset()
    yield
    perdure.configure(None)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """``tmp/proj`` with ``[tool.perdure] url``, and a nested working folder in it."""
    root = tmp_path / "proj"
    write_pyproject(root, '[project]\nname = "p"\n\n[tool.perdure]\nurl = "sqlite:///proj.db"\n')
    work = root / "src" / "pkg"
    work.mkdir(parents=True)
    return work


# -- resolve_url precedence --------------------------------------------------------------


def test_an_explicit_url_wins_over_env_and_pyproject(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERDURE_URL", "postgresql://env/db")
    assert resolve_url("sqlite:///arg.db", cwd=project) == "sqlite:///arg.db"


def test_perdure_url_wins_over_pyproject(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERDURE_URL", "postgresql://env/db")
    assert resolve_url(None, cwd=project) == "postgresql://env/db"


def test_an_empty_perdure_url_is_ignored(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERDURE_URL", "")
    assert resolve_url(None, cwd=project) == "sqlite:///proj.db"


def test_the_nearest_pyproject_url_is_used_from_a_nested_folder(project: Path) -> None:
    assert resolve_url(None, cwd=project) == "sqlite:///proj.db"
    write_pyproject(project.parent, '[tool.perdure]\nurl = "sqlite:///nearer.db"\n')
    assert resolve_url(None, cwd=project) == "sqlite:///nearer.db"


def test_a_pyproject_without_a_perdure_url_defers_to_its_parents(project: Path) -> None:
    write_pyproject(project, '[project]\nname = "inner"\n\n[tool.other]\nx = 1\n')
    assert resolve_url(None, cwd=project) == "sqlite:///proj.db"


def test_the_working_directory_is_searched_by_default(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project)
    assert resolve_url() == "sqlite:///proj.db"


def test_the_default_url_applies_when_nothing_is_configured(tmp_path: Path) -> None:
    assert not any((p / "pyproject.toml").exists() for p in (tmp_path, *tmp_path.parents))
    assert resolve_url(None, cwd=tmp_path) == DEFAULT_URL == "sqlite:///perdure.db"


def test_an_unreadable_pyproject_is_a_configuration_error_naming_the_file(
    tmp_path: Path,
) -> None:
    path = write_pyproject(tmp_path / "broken", "[tool.perdure\nurl = 'x'\n")
    with pytest.raises(ConfigurationError, match=str(path).replace("\\", "\\\\")):
        resolve_url(None, cwd=tmp_path / "broken")


@pytest.mark.parametrize("value", ["3", '""', "['sqlite:///a.db']"])
def test_a_pyproject_url_that_is_not_a_non_empty_string_is_a_configuration_error(
    tmp_path: Path, value: str
) -> None:
    write_pyproject(tmp_path / "bad", f"[tool.perdure]\nurl = {value}\n")
    with pytest.raises(ConfigurationError, match=r"\[tool.perdure\] url must be a non-empty"):
        resolve_url(None, cwd=tmp_path / "bad")


# -- opening a URL -----------------------------------------------------------------------


@pytest.mark.parametrize("url", ["nonsense", "sqlite:/x", "perdure.db", "://host/db"])
def test_a_malformed_url_is_a_configuration_error(url: str) -> None:
    with pytest.raises(ConfigurationError, match=r"malformed backend URL") as caught:
        open_backend(url)
    assert repr(url) in str(caught.value)


def test_a_malformed_url_explains_the_expected_form() -> None:
    with pytest.raises(ConfigurationError, match=r"expected scheme://.*sqlite:///perdure\.db"):
        open_backend("nonsense")


def test_an_unknown_scheme_is_a_configuration_error_listing_the_installed_ones() -> None:
    with pytest.raises(ConfigurationError) as caught:
        open_backend("nosuchdb://host/x")
    message = str(caught.value)
    assert "no backend for 'nosuchdb'" in message
    assert "'nosuchdb://host/x'" in message
    for scheme in ("sqlite", "postgresql"):
        assert scheme in message
    assert {"sqlite", "postgresql", "postgres"} <= set(schemes())


def test_register_backend_makes_a_scheme_open_case_insensitively() -> None:
    scheme = fresh_scheme()
    seen: list[str] = []
    backend = EmbeddedBackend(MemoryStore(), poll_interval=0.01)

    def factory(url: str) -> EmbeddedBackend:
        seen.append(url)
        return backend

    register_backend(scheme.upper(), factory)
    assert open_backend(f"{scheme}://one") is backend
    assert open_backend(f"{scheme.upper()}://two") is backend
    assert seen == [f"{scheme}://one", f"{scheme.upper()}://two"]
    assert scheme in schemes()


async def test_connect_with_a_malformed_url_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="malformed"):
        await perdure.connect("nonsense")
    with pytest.raises(ConfigurationError, match="no backend for"):
        await perdure.connect("nosuchdb://x")


async def test_module_api_runs_on_the_backend_the_url_resolves_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scheme = fresh_scheme()
    backend = EmbeddedBackend(MemoryStore(), poll_interval=0.01)
    register_backend(scheme, lambda url: backend)
    try:
        result = await perdure.run(ew.arithmetic, 2, 3, run_id="api-arg", url=f"{scheme}://a")
        assert result["sum"] == 5
        assert await perdure.connect(f"{scheme}://a") is backend  # shared in this loop
        monkeypatch.setenv("PERDURE_URL", f"{scheme}://a")
        assert (await perdure.get_run("api-arg")).status is perdure.RunStatus.SUCCEEDED
        perdure.configure(f"{scheme}://a")
        monkeypatch.setenv("PERDURE_URL", "nonsense")  # configure() outranks the env
        handle = await perdure.start(ew.arithmetic, 1, 1, run_id="api-configured")
        assert handle.backend is backend
        assert (await handle.result())["sum"] == 2
    finally:
        await perdure.shutdown()


def test_embedded_backend_rejects_non_positive_intervals() -> None:
    with pytest.raises(ConfigurationError, match="positive"):
        EmbeddedBackend(MemoryStore(), poll_interval=0)
    with pytest.raises(ConfigurationError, match="positive"):
        EmbeddedBackend(MemoryStore(), lease_seconds=-1)


# -- the workflow registry ---------------------------------------------------------------


def test_a_workflow_must_be_async() -> None:
    def not_async() -> None: ...

    with pytest.raises(ConfigurationError, match="needs an async function"):
        perdure.workflow(not_async)  # type: ignore[arg-type]


def test_a_local_workflow_needs_a_name() -> None:
    async def local() -> None: ...

    with pytest.raises(ConfigurationError, match="module level"):
        perdure.workflow(local)
    named = perdure.workflow(name="tests.local-named")(local)
    assert get_workflow("tests.local-named") is named


def test_workflows_register_under_module_and_qualname() -> None:
    assert ew.arithmetic.name == "engine_workflows:arithmetic"
    assert get_workflow("engine_workflows:arithmetic") is ew.arithmetic


def test_an_unregistered_workflow_name_is_a_typed_error_saying_what_to_import() -> None:
    with pytest.raises(WorkflowNotFoundError, match="import the module"):
        get_workflow("nowhere:nothing")
