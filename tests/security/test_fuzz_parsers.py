"""Hypothesis fuzzing (bounded examples) of the URL parsers and core decoders: whatever
the input, only typed perdure errors come out, and a password given in a URL is never
quoted back in the message."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perdure._errors import PerdureError
from perdure._registry import open_backend
from perdure._serialization import from_jsonable, loads
from perdure._stores.migrations import decode_event, decode_run, decode_signal
from perdure._stores.postgres import parse_postgres_url
from perdure._stores.sqlite import parse_sqlite_url
from perdure._tokens import verify_token
from perdure_dbos._backend import DbosUrl
from perdure_temporal.url import TemporalUrl

PASSWORD = "Zq9-hunter2-pw"
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

schemes = st.sampled_from(
    ["postgresql", "postgres", "sqlite", "temporal", "dbos+sqlite", "dbos+postgresql", "x"]
)
text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
urls = st.builds(
    lambda scheme, host, path, query: f"{scheme}://user:{PASSWORD}@{host}/{path}?{query}",
    schemes,
    text,
    text,
    st.one_of(text, st.builds(lambda k, v: f"{k}={v}&password={PASSWORD}", text, text)),
)


def typed_without_password(parse: Callable[[str], Any], url: str) -> None:
    try:
        parse(url)
    except PerdureError as exc:
        assert PASSWORD not in str(exc), (url, str(exc))


@FUZZ
@given(urls)
def test_postgres_url_parsing(url: str) -> None:
    typed_without_password(parse_postgres_url, url)


@FUZZ
@given(urls)
def test_sqlite_url_parsing(url: str) -> None:
    typed_without_password(parse_sqlite_url, url)


@FUZZ
@given(urls)
def test_temporal_url_parsing(url: str) -> None:
    typed_without_password(TemporalUrl.parse, url)


@FUZZ
@given(urls)
def test_dbos_url_parsing(url: str) -> None:
    typed_without_password(DbosUrl.parse, url)


@FUZZ
@given(urls)
def test_the_registry_opens_or_refuses_typed(url: str) -> None:
    typed_without_password(open_backend, url)  # opening is lazy: nothing connects here


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=20,
)
tagged = st.builds(
    lambda tag, t, v: {"__perdure__": tag, "t": t, "v": v},
    st.sampled_from(["dataclass", "pydantic", "tuple", "dict", "bytes", "float", "datetime",
                     "sealed", "nope"]),
    text,
    json_values,
)  # fmt: skip


@FUZZ
@given(st.one_of(json_values, tagged, st.lists(tagged, max_size=3)))
def test_from_jsonable_raises_only_typed_errors(data: Any) -> None:
    try:
        from_jsonable(data, "fuzzed value")
    except PerdureError:
        pass


@FUZZ
@given(st.lists(st.one_of(st.none(), st.integers(), st.floats(), text, st.booleans()),
                min_size=18, max_size=18))  # fmt: skip
def test_stored_rows_decode_or_raise_typed_errors(row: list[Any]) -> None:
    for decode, width in ((decode_run, 18), (decode_event, 7), (decode_signal, 7)):
        try:
            decode(row[:width])
        except PerdureError:
            pass


@FUZZ
@given(st.one_of(text, st.binary(max_size=40)))
def test_loads_raises_value_errors_only(raw: Any) -> None:
    try:
        loads(raw)
    except ValueError:
        pass


@FUZZ
@given(text)
def test_tokens_verify_or_raise_typed_errors(token: str) -> None:
    try:
        verify_token(token, key=b"k" * 32)
    except PerdureError:
        pass
