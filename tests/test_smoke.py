"""Every workspace package imports from the synced environment."""

import importlib

import pytest

PACKAGES = [
    "perdure",
    "perdure_langgraph",
    "perdure_openai_agents",
    "perdure_temporal",
    "perdure_dbos",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_package_imports(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__name__ == name
