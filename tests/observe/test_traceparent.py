"""W3C traceparent: the format, the 16 -> 32 hex rule, and a header reaching a real HTTP server."""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from taskfuse.observe import traceparent as w3c
from taskfuse.runtime import App
from tests.observe.conftest import WAIT_S

CORE_ID = "a3ce929d0e0e4736"  # what the core generates: 16 hex
CALLER_ID = "4bf92f3577b34da6a3ce929d0e0e4736"  # a W3C trace id passed in at submit


def test_a_core_trace_id_widens_deterministically_and_keeps_its_right_half() -> None:
    wide = w3c.w3c_trace_id(CORE_ID)
    assert len(wide) == 32 and wide.endswith(CORE_ID)
    assert wide[:16] != "0" * 16  # the spec: fill with a function of the id, not zeroes
    assert w3c.w3c_trace_id(CORE_ID) == wide  # every attempt, every process: the same
    assert w3c.task_trace_ids(wide) == [wide, CORE_ID]


def test_a_caller_w3c_id_is_kept_and_free_text_is_hashed() -> None:
    assert w3c.w3c_trace_id(CALLER_ID) == CALLER_ID
    assert w3c.task_trace_ids(CALLER_ID) == [CALLER_ID]
    free = w3c.w3c_trace_id("order-7781")
    assert len(free) == 32 and int(free, 16) and free == w3c.w3c_trace_id("order-7781")
    assert w3c.task_trace_ids("not hex") == []


def test_header_format_and_parse_round_trip() -> None:
    value = w3c.traceparent(CORE_ID)
    version, trace_id, span, flags = value.split("-")
    assert (version, flags) == ("00", "01") and len(span) == 16 and span != "0" * 16
    parsed = w3c.parse(value)
    assert parsed.trace_id == trace_id and str(parsed) == value
    assert w3c.traceparent(CORE_ID) != value  # a new span id for every call
    assert w3c.headers(CORE_ID, {"Accept": "application/json"})["Accept"] == "application/json"


@pytest.mark.parametrize("bad", [
    "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # version ff is invalid
    "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # all-zero trace id
    "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # all-zero parent id
    "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  # uppercase
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",  # 00 has 4 fields
    "00-4bf92f3577b34da6-00f067aa0ba902b7-01",  # short trace id
])
def test_invalid_traceparents_are_refused(bad: str) -> None:
    with pytest.raises(w3c.TraceparentError):
        w3c.parse(bad)


def test_a_later_version_may_carry_more_fields() -> None:
    parsed = w3c.parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future")
    assert parsed.trace_id == CALLER_ID and parsed.version == "01"


def test_trace_id_from_what_a_caller_passes() -> None:
    header = f"00-{CALLER_ID}-00f067aa0ba902b7-01"
    assert w3c.trace_id_from(header) == CALLER_ID  # continue the caller's trace
    assert w3c.trace_id_from(CORE_ID.upper()) == CORE_ID
    assert w3c.trace_id_from("order-7781") == "order-7781"


# -- a header reaching a loopback server from inside a task --------------------------------


@pytest.fixture
def partner() -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A real HTTP server on 127.0.0.1 (free port) that records the headers it receives."""
    seen: list[dict[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append({k.lower(): v for k, v in self.headers.items()})
            body = b"ok"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:  # keep test output quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/sku", seen
    server.shutdown()
    server.server_close()
    thread.join(timeout=2)


def test_a_task_sends_its_trace_to_the_partner(make_runner, partner) -> None:
    url, seen = partner
    app = App()
    app.downstream("partner", bulkhead=2)

    @app.task("sync_sku", downstreams=("partner",))
    def sync_sku(ctx, payload):
        for _ in range(2):
            with ctx.downstream("partner"):
                request = urllib.request.Request(url, headers=ctx.http_headers())
                with urllib.request.urlopen(request, timeout=WAIT_S) as response:
                    assert response.read() == b"ok"
        return ctx.traceparent()

    runner = make_runner(app, workers=2)
    ours = runner.submit("sync_sku", "A1")
    theirs = runner.submit("sync_sku", "B2", trace_id=CALLER_ID)
    assert runner.join(WAIT_S)
    assert len(seen) == 4
    received = [w3c.parse(h["traceparent"]) for h in seen]
    by_trace: dict[str, list[w3c.TraceParent]] = {}
    for tp in received:
        by_trace.setdefault(tp.trace_id, []).append(tp)
    wide = w3c.w3c_trace_id(ours.trace_id)
    assert set(by_trace) == {wide, CALLER_ID}
    assert wide[16:] == ours.trace_id and theirs.trace_id == CALLER_ID
    assert len({tp.parent_id for tp in received}) == 4  # one span per call
    assert {tp.flags for tp in received} == {"01"}
    assert runner.get(ours.task_id).result.split("-")[1] == wide
