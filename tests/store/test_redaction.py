"""No credential in any output: every shape of store URL, through every way out.

Shapes: a password in the userinfo (plain, percent-encoded, with `@` or `?` in it, on a
multi-host or IPv6 URL), secret query parameters (password, sslpassword, passfile, sslkey,
oauth_client_secret, a percent-encoded name), and keyword/value conninfo strings. Outputs:
error lines of `taskfuse` (unreachable database, bad port, bad percent-encoding that libpq
echoes, unknown scheme), log lines (text and JSON, the worker's start line, the sweeper's),
the load test's trace header and report, Prometheus labels, and the fleet monitor's title.
Each test uses secrets of its own, so one test's remembered secrets cannot hide another's
leak.
"""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import urllib.request
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from taskfuse.cli import main as taskfuse_main
from taskfuse.store import describe_error, redact_text, redact_url
from tests.store.backends import PG_URL, drop_schema, need_pg, new_schema

ROOT = Path(__file__).resolve().parents[2]


def secret() -> str:
    return f"S3cr3t{uuid.uuid4().hex[:10]}"


def shapes(s: str) -> list[str]:
    """Every way a URL or conninfo string carries the secret `s` (what must stay is 'db1')."""
    return [
        f"postgresql://alice:{s}@db1.example:5432/app",
        f"postgres://alice:{s}@db1.example/app?sslmode=require",
        f"postgresql://alice:{s}@db1.example:5432,db2.example:5433/app",
        f"postgresql://alice:{s}@[::1]:5432/app?db1",
        f"postgresql://alice:p%40{s}@db1.example/app",
        f"postgresql://alice:p@{s}@db1.example/app",
        f"postgresql://alice:p?{s}@db1.example/app",
        f"postgresql://:{s}@db1.example/app",
        f"postgresql://alice@db1.example/app?password={s}",
        f"postgresql://alice@db1.example/app?sslmode=require&sslpassword={s}&x=1",
        f"postgresql://alice@db1.example/app?passfile=/home/alice/{s}.pgpass",
        f"postgresql://alice@db1.example/app?sslkey=/keys/{s}.key",
        f"postgresql://alice@db1.example/app?oauth_client_secret={s}",
        f"postgresql://alice@db1.example/app?pass%77ord={s}",
        f"postgresql://alice@db1.example/app?password={s}#frag",
        f"host=db1.example user=alice password={s} dbname=app",
        f"host=db1.example password = '{s} with spaces' dbname=app",
        f"dbname=app sslpassword={s} host=db1.example",
        f"redis://:{s}@db1.example:6379/0",
    ]


@pytest.mark.parametrize("index", range(len(shapes("x"))))
def test_every_shape_is_masked_and_the_rest_kept(index: int) -> None:
    s = secret()
    url = shapes(s)[index]
    for shown in (redact_url(url), redact_text(f"cannot connect to {url}: refused"),
                  redact_text(f"error: '{url}'"), describe_error(OSError(f"bad {url}\nmore"))):
        assert s not in shown and "***" in shown, shown
        assert "db1" in shown or "::1" in shown, shown
        assert "\n" not in shown


def test_free_text_keeps_its_punctuation_and_nested_urls_are_masked() -> None:
    s = secret()
    shown = redact_text(f"tried postgresql://a@db1/app?password={s}, then gave up.")
    assert shown == "tried postgresql://a@db1/app?password=***, then gave up."
    shown = redact_text(f"(see postgresql://a:{s}@db1/app).")
    assert shown == "(see postgresql://a:***@db1/app)."
    for url in (f"nosuch://postgresql://u:{s}@db1/app", f"x://y://u:{s}@db1/app?password={s}"):
        assert s not in redact_url(url) and "db1" in redact_url(url), redact_url(url)
        assert s not in redact_text(f"unknown scheme: {url}")


def test_a_url_without_secrets_is_left_alone() -> None:
    for url in ("postgresql://alice@db1.example:5432/app?sslmode=require&application_name=x",
                "sqlite:///tmp/a@b.db", "memory://", "host=db1 port=5432 dbname=app"):
        assert redact_url(url) == url


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = taskfuse_main(list(argv))
    out, err = capsys.readouterr()
    return code, out + err


@pytest.mark.parametrize("template", [
    "postgresql://alice:{s}@127.0.0.1:1/app",
    "postgresql://alice@127.0.0.1:1/app?password={s}&sslpassword={s}x",
    "postgresql://alice:{s}@127.0.0.1:notaport/app",
    "postgresql://alice:bad%zz{s}@127.0.0.1:1/app",
    "host=127.0.0.1 port=1 password={s}",
    "redis://:{s}@127.0.0.1/0",
    "sqlite:///{s}.db?password={s}",
])
def test_error_lines_of_taskfuse_show_no_secret(capsys: pytest.CaptureFixture[str],
                                                template: str) -> None:
    s = secret()
    code, text = run(capsys, "status", "--store", template.format(s=s))
    assert code == 2 and text.count("\n") == 1, text
    assert s not in text, text


def test_log_lines_show_no_secret_text_or_json() -> None:
    from taskfuse.runtime import logs

    s = secret()
    for json_lines in (False, True):
        stream = io.StringIO()
        handler = logs.configure(logging.INFO, json_lines, stream)
        try:
            log = logging.getLogger("taskfuse.test_redaction")
            log.info("opening %s", f"postgresql://alice:{s}@db1/app")
            log.warning("conninfo host=db1 password=%s dbname=app", s)
            try:
                raise RuntimeError(f"failed: postgresql://alice@db1/app?sslpassword={s}")
            except RuntimeError:
                log.exception("with a traceback")
        finally:
            logging.getLogger("taskfuse").removeHandler(handler)
        text = stream.getvalue()
        assert s not in text and text.count("***") >= 3, text
        if json_lines:
            assert all(json.loads(line) for line in text.splitlines())


def with_password(url: str, password: str, **params: str) -> str:
    parts = urlsplit(url)
    netloc = f"{parts.username}:{password}@{parts.hostname}:{parts.port}"
    query = "&".join([parts.query, *(f"{k}={v}" for k, v in params.items())]).strip("&")
    return urlunsplit(parts._replace(netloc=netloc, query=query))


@pytest.fixture
def pg_secret_url() -> tuple[str, set[str]]:
    """A working PostgreSQL URL (trust authentication ignores the password) with secrets."""
    need_pg()
    schema = new_schema()
    s1, s2 = secret(), secret()
    yield with_password(PG_URL, s1, schema=schema, sslpassword=s2), {s1, s2}
    drop_schema(schema)


def test_the_worker_start_line_shows_no_secret(capsys: pytest.CaptureFixture[str],
                                               pg_secret_url: tuple[str, set[str]]) -> None:
    url, secrets = pg_secret_url
    for extra in ([], ["--log-json"]):
        code, text = run(capsys, "worker", "--store", url, "--app",
                         "tests.runtime.sample_app:app", "--drain", *extra)
        assert code == 0 and "started" in text, text
        assert not any(s in text for s in secrets), text


def test_the_sweeper_start_line_shows_no_secret(pg_secret_url: tuple[str, set[str]]) -> None:
    url, secrets = pg_secret_url
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "taskfuse.cli", "sweep", "--store", url,
                             "--every", "0.05"], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        first = proc.stderr.readline()  # type: ignore[union-attr]
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "sweeper started on postgresql://postgres:***@" in first, first + err
    assert not any(s in first + out + err for s in secrets)


def test_the_load_tests_trace_and_report_show_no_secret(
        tmp_path: Path, pg_secret_url: tuple[str, set[str]]) -> None:
    from lab.loadtest.runner import run_loadtest
    from lab.scenario import parse_scenario
    from taskfuse.trace import read_trace

    url, secrets = pg_secret_url
    scenario = parse_scenario(textwrap.dedent("""
        name: secrets
        horizon_s: 30
        workers: 2
        pools:
          db: {size: 1}
        batches:
          - id: b
            count: 4
            program:
              - db: {pool: db, query: 0.01}
    """), "<test>")
    result = run_loadtest(scenario, time_scale=0.2, store_url=url, trace=tmp_path / "t.trace")
    trace = read_trace(tmp_path / "t.trace")
    shown = json.dumps([trace.header, trace.report, result.report])
    assert "postgresql://postgres:***@" in shown
    assert not any(s in shown for s in secrets)


def test_metrics_labels_show_no_secret() -> None:
    from taskfuse.observe.prometheus import serve_runner
    from taskfuse.runtime import App, Runner
    from taskfuse.store.memory import MemoryStore

    s = secret()
    runner = Runner(App(f"app-postgresql://alice:{s}@db1/app"), MemoryStore(), workers=1,
                    worker_id=f"host:1 host=db1 password={s}")
    server = serve_runner(runner, 0, "127.0.0.1")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics") as answer:
            text = answer.read().decode()
    finally:
        server.close()
    assert "taskfuse_worker_info" in text and "***" in text
    assert s not in text


def test_the_fleet_monitor_title_and_errors_show_no_secret(
        pg_secret_url: tuple[str, set[str]]) -> None:
    from taskfuse.store import open_store
    from tui.fleet_app import FleetApp, FleetOpenError, open_fleet

    url, secrets = pg_secret_url
    store = open_store(url)
    try:
        app = FleetApp(store, url)
        assert "postgres:***@" in app.shown_url
        assert not any(s in app.shown_url for s in secrets)
    finally:
        store.close()
    s = secret()
    with pytest.raises(FleetOpenError) as info:
        open_fleet(f"postgresql://alice@127.0.0.1:1/app?password={s}&sslpassword={s}")
    assert s not in str(info.value) and "***" in str(info.value)
