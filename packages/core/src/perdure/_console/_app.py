"""The console's Starlette app: pages, htmx fragments, actions, login, export, metrics."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from perdure._authorization import AuthenticationError, AuthorizationError
from perdure._backend import Backend
from perdure._cli.render import fmt_clock, fmt_time, relative, short, span
from perdure._config import resolve_url
from perdure._console import _actions, _auth, _throttle, _views
from perdure._errors import BackendUnavailableError, InvalidRunStateError, RunNotFoundError
from perdure._records import RunStatus
from perdure._registry import open_backend
from perdure._revealed import revealed_events, revealed_run

HERE = Path(__file__).parent
#: Where exports were before ``/export/``: the run page redirects what it cannot find.
LEGACY_EXPORT = "/export.jsonl"
#: htmx polls each open page this often: one list query (or one run read) per interval.
REFRESH_SECONDS = 5


@dataclass(slots=True)
class ConsoleSettings:
    """How a console is set up; ``backend`` wins over ``url`` (tests pass an open one)."""

    secret: str
    url: str | None = None
    backend: Backend | None = None
    authorize: _actions.Authorize = _actions.any_operator
    refresh_seconds: int = REFRESH_SECONDS
    #: Serve the cookie only over HTTPS (set it when a TLS proxy fronts the console).
    https_only: bool = False
    title: str = "perdure"
    extra: dict[str, Any] = field(default_factory=lambda: {})
    #: A scraper's bearer token for ``/metrics``. Without one only logged-in operators
    #: read ``/metrics``: it names workflows and signals and counts the backlog, which
    #: is not for anyone who can reach the port (``--host 0.0.0.0``).
    metrics_token: str | None = None
    #: Failed logins per client and window before the console answers 429.
    login_throttle: _throttle.LoginThrottle = field(default_factory=_throttle.LoginThrottle)


def _templates() -> Jinja2Templates:
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    filters: dict[str, Any] = templates.env.filters  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    filters.update(
        ago=relative,
        when=fmt_time,
        clock=fmt_clock,
        span=span,
        waited=_waited,
        short=short,
        pretty=_pretty,
        run_path=run_path,
        export_path=export_path,
    )
    env_globals: dict[str, Any] = templates.env.globals  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    env_globals["statuses"] = list(RunStatus)
    return templates


def _waited(seconds: float) -> str:
    """A wait: tenths under a minute (an approval can take 2.4s in a test), else ``span``."""
    return f"{seconds:.1f}s" if seconds < 60 else span(seconds)


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


class Console:
    """The request handlers, bound to one backend and one set of settings."""

    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = settings
        self.auth = _auth.SharedSecret(settings.secret)
        self.tokens = _auth.SessionTokens()
        self.templates = _templates()
        self.backend: Backend | None = settings.backend
        self._owns_backend = settings.backend is None

    # -- plumbing --------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncGenerator[None]:
        if self.backend is None:
            self.backend = open_backend(resolve_url(self.settings.url))
        await self.backend.open()
        try:
            yield
        finally:
            if self._owns_backend:
                await self.backend.close()

    @property
    def store(self) -> Backend:
        assert self.backend is not None, "the console's backend opens with the app"
        return self.backend

    def render(
        self, request: Request, name: str, context: dict[str, Any], status: int = 200
    ) -> HTMLResponse:
        session: dict[str, Any] = request.session
        flash = session.pop("flash", None)
        base = {
            "operator": _auth.operator(request),
            "csrf": _auth.csrf_token(request),
            "refresh": self.settings.refresh_seconds,
            "title": self.settings.title,
            "flash": flash,
        }
        return self.templates.TemplateResponse(
            request, name, {**base, **context}, status_code=status
        )

    def _login_redirect(self, request: Request) -> RedirectResponse:
        # the path as sent (still quoted): a run id holding "?" or "%" comes back intact
        raw: bytes = request.scope.get("raw_path") or request.url.path.encode()
        target = raw.decode("latin-1") + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/login?next={quote(target)}", status_code=303)

    def _refused(self, request: Request, why: str) -> HTMLResponse:
        return self.render(request, "refused.html", {"why": why}, status=403)

    # -- pages -----------------------------------------------------------------------

    async def runs(self, request: Request) -> Response:
        if _auth.operator(request) is None:
            return self._login_redirect(request)
        filters = _views.parse_filters(dict(request.query_params))
        page = await _views.runs_page(self.store, filters)
        fragment = request.headers.get("HX-Request") == "true"
        name = "_runs_body.html" if fragment else "runs.html"
        return self.render(request, name, {"page": page, "f": filters})

    async def run(self, request: Request) -> Response:
        if _auth.operator(request) is None:
            return self._login_redirect(request)
        run_id = request.path_params["run_id"]
        try:
            view = await _views.run_view(self.store, run_id)
        except RunNotFoundError:
            if run_id.endswith(LEGACY_EXPORT):  # a link from before exports had /export/
                target = export_path(run_id.removesuffix(LEGACY_EXPORT))
                return RedirectResponse(target, status_code=308)
            return self.render(request, "not_found.html", {"run_id": run_id}, status=404)
        fragment = request.headers.get("HX-Request") == "true"
        name = "_run_body.html" if fragment else "run.html"
        return self.render(request, name, {"v": view})

    async def export(self, request: Request) -> Response:
        if _auth.operator(request) is None:
            return self._login_redirect(request)
        run_id = request.path_params["run_id"]
        try:
            info = revealed_run(await self.store.get_run(run_id))
            events = revealed_events(await self.store.history(run_id))
        except RunNotFoundError:
            return self.render(request, "not_found.html", {"run_id": run_id}, status=404)

        def lines() -> Any:
            yield json.dumps({"run": info.to_json()}, ensure_ascii=False, default=str) + "\n"
            for ev in events:
                yield json.dumps(ev.to_json(), ensure_ascii=False, default=str) + "\n"

        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in run_id)
        return StreamingResponse(
            lines(),
            media_type="application/x-ndjson",
            headers={"Content-Disposition": f'attachment; filename="{safe}.jsonl"'},
        )

    # -- actions ---------------------------------------------------------------------

    async def act(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        form = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}
        who = _auth.operator(request)
        if who is None:
            return self._refused(request, "log in before acting on a run")
        if not _auth.csrf_ok(request, form.get("csrf")):
            return self._refused(request, "the form's CSRF token is missing or stale; reload")
        back = run_path(run_id)
        session: dict[str, Any] = request.session
        try:
            action = _actions.parse_action(request.path_params["action"], run_id, form)
            said = await _actions.perform(
                self.store, who, action, self.settings.authorize, self.tokens.token(request)
            )
        except (_actions.ActionRefused, AuthenticationError, AuthorizationError) as exc:
            return self._refused(request, str(exc))
        except RunNotFoundError:
            return self.render(request, "not_found.html", {"run_id": run_id}, status=404)
        except (_actions.ActionInvalid, InvalidRunStateError) as exc:
            session["flash"] = ["error", str(exc)]
            return RedirectResponse(back, status_code=303)
        session["flash"] = ["ok", said]
        return RedirectResponse(back, status_code=303)

    # -- login -----------------------------------------------------------------------

    async def login(self, request: Request) -> Response:
        target = _safe_next(request.query_params.get("next", "/"))
        if request.method == "GET":
            return self.render(request, "login.html", {"next": target, "error": None})
        form = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}
        target = _safe_next(form.get("next", "/"))
        if not _auth.csrf_ok(request, form.get("csrf")):
            return self._refused(request, "the login form's CSRF token is missing or stale")
        client = request.client.host if request.client else "?"
        throttle = self.settings.login_throttle
        try:
            throttle.check(client)  # before the secret: a throttled right guess fails too
            token = form.get("token", "").strip()
            name = self.auth.login(form.get("name", ""), form.get("secret", ""), token)
        except _throttle.LoginThrottled as exc:
            context = {"next": target, "error": str(exc)}
            response = self.render(request, "login.html", context, status=429)
            response.headers["Retry-After"] = str(exc.retry_after)
            return response
        except _auth.LoginError as exc:
            throttle.failed(client)
            context = {"next": target, "error": str(exc)}
            return self.render(request, "login.html", context, status=401)
        throttle.succeeded(client)
        self.tokens.forget(request)
        _auth.sign_in(request, name)
        if token:
            self.tokens.keep(request, token)
        return RedirectResponse(target, status_code=303)

    async def logout(self, request: Request) -> Response:
        form = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}
        if not _auth.csrf_ok(request, form.get("csrf")):
            return self._refused(request, "the form's CSRF token is missing or stale")
        _auth.sign_out(request, self.tokens)
        return RedirectResponse("/login", status_code=303)

    async def metrics(self, request: Request) -> Response:
        """Prometheus exposition, for a logged-in operator or a scraper with the token."""
        from perdure import _metrics as metrics

        if _auth.operator(request) is None and not _auth.bearer_ok(
            request, self.settings.metrics_token
        ):
            return PlainTextResponse(
                "/metrics needs the scrape token (Authorization: Bearer ...) "
                "or an operator login\n",
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="perdure console"'},
            )
        body, content_type = await metrics.exposition(self.store)
        return Response(body, media_type=content_type)


def run_path(run_id: str) -> str:
    """The run page of ``run_id``, quoted whole (its "/" too: one path segment)."""
    return f"/runs/{quote(run_id, safe='')}"


def export_path(run_id: str) -> str:
    """The JSONL export of ``run_id``: a prefix of its own, so that no run id (not even
    one ending in ``/export.jsonl``) can name another run's export."""
    return f"/export/{quote(run_id, safe='')}"


def _safe_next(target: str) -> str:
    """Only a path on this site: a login never redirects elsewhere."""
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return "/"
    return target


async def _unavailable(request: Request, exc: Exception) -> Response:
    return HTMLResponse(f"<h1>backend unavailable</h1><p>{_escape(str(exc))}</p>", status_code=503)


def _escape(text: str) -> str:
    from markupsafe import escape

    return str(escape(text))


def create_app(settings: ConsoleSettings) -> Starlette:
    """The console as an ASGI app (serve it with uvicorn, or mount it)."""
    console = Console(settings)
    routes = [
        # Run ids may hold "/" (path converter). An action is the last segment of a POST
        # (the run id is all before it); a GET of /runs/a/b falls through the POST-only
        # action route to the run page, and exports have their own prefix.
        Route("/", console.runs, name="runs"),
        Route("/export/{run_id:path}", console.export, name="export"),
        Route("/runs/{run_id:path}/{action:str}", console.act, methods=["POST"], name="act"),
        Route("/runs/{run_id:path}", console.run, name="run"),
        Route("/login", console.login, methods=["GET", "POST"], name="login"),
        Route("/logout", console.logout, methods=["POST"], name="logout"),
        Route("/metrics", console.metrics, name="metrics"),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    middleware = [
        Middleware(
            SessionMiddleware,
            secret_key=console.auth.session_key,
            session_cookie=_auth.COOKIE,
            max_age=_auth.SESSION_SECONDS,
            same_site="strict",
            https_only=settings.https_only,
        )
    ]
    app = Starlette(
        routes=routes,
        middleware=middleware,
        lifespan=console.lifespan,
        exception_handlers={BackendUnavailableError: _unavailable},
    )
    app.state.console = console
    return app
