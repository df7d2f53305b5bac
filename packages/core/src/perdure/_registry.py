"""URL scheme → backend, like SQLAlchemy's dialect registry.

Packages register a factory ``open_backend(url) -> Backend`` under the entry-point
group ``perdure.backends`` with the URL scheme as its name (``sqlite``,
``postgresql``, ``temporal``, ``dbos+sqlite``...); ``register_backend`` does the same
at run time.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable

from perdure import _url_options as url_options
from perdure._backend import Backend
from perdure._errors import ConfigurationError
from perdure._urls import split_url

BackendFactory = Callable[[str], Backend]

_factories: dict[str, BackendFactory] = {}


def register_backend(scheme: str, factory: BackendFactory) -> None:
    """Make ``scheme://`` URLs open with ``factory``."""
    _factories[scheme.lower()] = factory


def _scheme(url: str) -> str:
    if "://" not in url:
        raise ConfigurationError(
            f"malformed backend URL {url!r}: expected scheme://..., "
            "e.g. sqlite:///perdure.db or postgresql://user@host/db"
        )
    try:
        scheme = split_url(url).scheme.lower()
    except ValueError as exc:
        raise ConfigurationError(f"malformed backend URL {url!r}: {exc}") from exc
    if not scheme:
        raise ConfigurationError(f"malformed backend URL {url!r}: no scheme")
    return scheme


def schemes() -> list[str]:
    """Every URL scheme this installation can open."""
    names = set(_factories)
    names.update(ep.name for ep in importlib.metadata.entry_points(group="perdure.backends"))
    return sorted(names)


def open_backend(url: str) -> Backend:
    """A new, unopened backend for ``url`` (perdure's own options, such as
    ``retention=``, are taken off first: see ``perdure._url_options``)."""
    url = url_options.backend_url(url)
    scheme = _scheme(url)
    factory = _factories.get(scheme)
    if factory is None:
        for ep in importlib.metadata.entry_points(group="perdure.backends", name=scheme):
            try:
                factory = ep.load()
            except ImportError as exc:
                raise ConfigurationError(
                    f"the backend for {scheme!r} URLs ({ep.value}) cannot be imported: {exc}"
                ) from exc
            _factories[scheme] = factory
            break
    if factory is None:
        raise ConfigurationError(
            f"no backend for {scheme!r} URLs (in {url!r}); installed: {', '.join(schemes())}. "
            "Temporal and DBOS need perdure[temporal] / perdure[dbos]"
        )
    return factory(url)


#: Schemes whose URL already names a SQL database adapters can keep their tables in.
_SQL_SCHEMES = ("sqlite", "postgresql", "postgres")


def state_url(url: str) -> str:
    """The SQL database (``sqlite:///`` or ``postgresql://``) where adapters keep their
    own tables — LangGraph checkpoints, Agents SDK sessions — for the backend ``url``.

    A SQL URL is its own; another backend maps its URL under the entry-point group
    ``perdure.state_urls`` (scheme → ``(url) -> sql url``), e.g. Temporal's ``state=``.
    perdure's own options (``retention=``) are not part of it.
    """
    url = url_options.backend_url(url)
    scheme = _scheme(url)
    if scheme in _SQL_SCHEMES:
        return url
    for ep in importlib.metadata.entry_points(group="perdure.state_urls", name=scheme):
        mapper: Callable[[str], str] = ep.load()
        mapped = mapper(url)
        if _scheme(mapped) not in _SQL_SCHEMES:
            raise ConfigurationError(f"{ep.value} mapped {url!r} to {mapped!r}, not a SQL URL")
        return mapped
    raise ConfigurationError(
        f"adapter state on {scheme}:// URLs is not supported: it needs sqlite:///, "
        "postgresql:// or a backend that names its SQL database"
    )
