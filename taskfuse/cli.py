"""`taskfuse`: the operator's command — run workers, submit, look, cancel, sweep, inspect.

    taskfuse worker  --store URL --app module:obj [--limits FILE] [--workers N]
                     [--trace PATH] [--metrics-port P] [--log-json]
    taskfuse submit  --store URL KIND [--payload JSON] [--batch ID --cap N] [--key KEY]
                     [--trace-id TRACE_ID_OR_TRACEPARENT] [--limits FILE]
    taskfuse status  --store URL [BATCH] [--json] [--app module:obj] [--limits FILE]
    taskfuse cancel  --store URL TASK_OR_BATCH
    taskfuse sweep   --store URL [--limits FILE] [--every S] [--once] [--log-json]
    taskfuse inspect --store URL TASK_ID_OR_TRACE_ID [--trace PATH]
    taskfuse retry   --store URL TASK_OR_BATCH [--status S,...] [--reset-attempts] [--dry-run]
    taskfuse wait    --store URL TASK_OR_BATCH [--timeout S] [--json]
    taskfuse result  --store URL TASK [--json]
    taskfuse prune   --store URL --older-than AGE [--status S,...] [--batch B] [--dry-run]

`--store` defaults to $TASKFUSE_STORE, `--app` to $TASKFUSE_APP and `--limits` to
$TASKFUSE_LIMITS: a limits file (`lab size --write-limits`, `lab schema --limits`) whose
values win over the app's own; a flag given on the command line wins over the file.
Exit codes: 0 done, 1 nothing to do (cancel of a finished task or batch) or an internal
error, 2 a usage mistake (unknown store scheme, bad URL, unreachable database, unknown kind,
bad JSON, unknown task, a bad limits file), 130 Ctrl-C (a worker or sweeper stops
gracefully first; SIGTERM stops them with 0), 141 the reader of stdout went away. Mistakes
print one line on stderr, credentials masked; `-v` adds the traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from taskfuse.cliguard import (
    EXIT_INTERRUPTED,
    OneLineParser,
    duration_arg,
    interruptible,
    number_arg,
    period_arg,
    run_printing,
    text_arg,
)
from taskfuse.cliparts import CliError, opened_store, positive_float
from taskfuse.configfile import ConfigError, located
from taskfuse.core import bounds
from taskfuse.core.history import record_history
from taskfuse.core.scheduler import Scheduler
from taskfuse.core.states import TERMINAL, TaskfuseError, TaskStatus, derive_batch_status
from taskfuse.core.storeapi import Store
from taskfuse.core.task import Batch, Task, TaskSpec
from taskfuse.limits.files import read_limits_document
from taskfuse.limits.schema import MAX_WORKERS, Limits
from taskfuse.runtime import logs
from taskfuse.runtime.app import DEFAULT_LEASE_S, App
from taskfuse.store import describe_error, redact_text, redact_url
from taskfuse.textable import columns, shown
from taskfuse.tuning import worker_heap
from taskfuse.version import version_line

if TYPE_CHECKING:
    from taskfuse.observe.prometheus import MetricsServer
    from taskfuse.runtime.threads import Runner

PROG = "taskfuse"
STATUS_ORDER = list(TaskStatus)
log = logging.getLogger("taskfuse.cli")


# -- entry point ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit status (never raises for a user's mistake)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed usage or help
        return int(exc.code or 0)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    verbose = bool(args.verbose)
    try:
        with interruptible():  # Ctrl-C stops any command, however it was started
            return run_printing(lambda: int(args.func(args)))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as exc:
        return _report(exc, verbose, bool(getattr(args, "log_json", False)))


def _report(exc: Exception, verbose: bool, json_lines: bool = False) -> int:
    """Print one line for an error (a traceback with -v) and choose the exit status; with
    --log-json that line is a JSON record, the traceback in its `error` field."""
    message = user_error(exc)
    trace = "".join(traceback.format_exception(exc)) if verbose else None
    if message is not None:
        text, code = f"{PROG}: error: {redact_text(' '.join(message.splitlines()))}", 2
    else:
        hint = "" if verbose else " (run with -v for the traceback)"
        text = f"{PROG}: internal error: {type(exc).__name__}: {describe_error(exc)}{hint}"
        code = 1
    if json_lines:
        print(logs.line(logging.ERROR, text, json_lines=True, error=trace), file=sys.stderr)
        return code
    if trace is not None:
        sys.stderr.write(redact_text(trace))
    print(text, file=sys.stderr)
    return code


def user_error(exc: BaseException) -> str | None:
    """The one-line message for a mistake the user can fix, or None for a bug."""
    if isinstance(exc, CliError | TaskfuseError | ConfigError):
        return str(exc)
    module = type(exc).__module__.split(".")[0]
    if module in ("sqlite3", "psycopg", "psycopg_pool"):
        return f"store unavailable: {describe_error(exc)}"
    if isinstance(exc, OSError):
        return describe_error(exc)
    return None


# -- the parser ----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand (also used to render --help)."""
    common = OneLineParser(add_help=False)
    common.add_argument(
        "--store", default=os.environ.get("TASKFUSE_STORE"),
        help="store URL: sqlite:///PATH, postgresql://..., memory:// (default $TASKFUSE_STORE)",
    )
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="debug logging, and tracebacks for errors")
    parser = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", default=False,
                        help="debug logging, and tracebacks for errors")
    parser.add_argument("--version", action="version", version=version_line(PROG))

    sub = parser.add_subparsers(title="commands", metavar="COMMAND", parser_class=OneLineParser)
    for add in (_add_worker, _add_submit, _add_status, _add_cancel, _add_sweep, _add_inspect):
        add(sub, common)
    from taskfuse.opscli import add_commands  # retry, wait, result, prune

    add_commands(sub, common)
    return parser


def _add_worker(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("worker", parents=[common], help="run task functions from the store")
    p.add_argument("--app", default=os.environ.get("TASKFUSE_APP"),
                   help="module:object of the App with the task functions ($TASKFUSE_APP)")
    _limits_arg(p)
    p.add_argument("--workers", type=_workers, default=None,
                   help="worker threads (the limits file's workers, else 4)")
    p.add_argument("--trace", help="write a trace file (follow it with `lab watch --follow`)")
    p.add_argument("--trace-interval", type=_period, default=1.0, metavar="S",
                   help="seconds between timeline samples in the trace (1)")
    p.add_argument("--grace", type=_non_negative_float, default=30.0, metavar="S",
                   help="on SIGTERM/SIGINT, seconds running tasks get to finish (30)")
    p.add_argument("--lease", type=_period, default=None, metavar="S",
                   help=f"task lease renewed by heartbeats (the limits' sweeper.lease_s, else "
                        f"the app's, default {DEFAULT_LEASE_S:g})")
    p.add_argument("--id", dest="worker_id", type=text_arg,
                   help="worker id recorded on tasks (host:pid)")
    p.add_argument("--drain", action="store_true",
                   help="exit once no task is PENDING or RUNNING (a one-off batch run)")
    p.add_argument("--log-json", action="store_true", help="log one JSON object per line")
    p.add_argument("--metrics-port", type=_port, default=None, metavar="P",
                   help="serve Prometheus metrics at http://ADDR:P/metrics (0: any free port)")
    p.add_argument("--metrics-addr", default="0.0.0.0", metavar="ADDR",
                   help="address the metrics endpoint listens on (0.0.0.0)")
    p.set_defaults(func=cmd_worker)


def _add_submit(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("submit", parents=[common], help="submit one task")
    p.add_argument("kind", type=text_arg, help="the task kind (its registered function name)")
    p.add_argument("--payload", default=None, type=text_arg, help="the payload as JSON")
    p.add_argument("--batch", type=text_arg, help="batch id (created if new)")
    p.add_argument("--cap", type=_positive_int, help="batch concurrency cap (new batch only)")
    p.add_argument("--key", type=text_arg,
                   help="idempotency key: a second submit returns the first task")
    p.add_argument("--priority", type=_priority, default=None, help="higher runs first")
    p.add_argument("--timeout", type=_duration, default=None, metavar="S")
    p.add_argument("--max-retry", type=_retries, default=None, metavar="N")
    p.add_argument("--depends-on", action="append", default=[], metavar="TASK_ID", type=text_arg,
                   help="run only after this task succeeded (repeatable)")
    p.add_argument("--id", dest="task_id", type=text_arg,
                   help="choose the task id (default: generated)")
    p.add_argument("--trace-id", metavar="ID", type=text_arg,
                   help="the caller's trace: a trace id, or a W3C traceparent value to continue "
                        "(default: generated)")
    p.add_argument("--app", default=os.environ.get("TASKFUSE_APP"),
                   help="module:object: check the kind and use its registered defaults")
    p.add_argument("--json", action="store_true", help="print the task record as JSON")
    _limits_arg(p, "apply its kinds' and batches' defaults and batch caps")
    p.set_defaults(func=cmd_submit)


def _add_status(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("status", parents=[common], help="counts by state, per batch")
    p.add_argument("batch", nargs="?", type=text_arg, help="one batch (default: all)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--app", default=os.environ.get("TASKFUSE_APP"),
                   help="module:object: also list the app's schedules and their next tick")
    _limits_arg(p, "also list its schedules and their next tick")
    p.set_defaults(func=cmd_status)


def _add_cancel(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("cancel", parents=[common], help="cancel a task or a whole batch")
    p.add_argument("target", metavar="TASK_OR_BATCH", type=text_arg)
    p.add_argument("--reason", default="canceled by operator", type=text_arg)
    p.set_defaults(func=cmd_cancel)


def _add_sweep(sub: Any, common: argparse.ArgumentParser) -> None:
    from taskfuse.runtime.sweeper import RULES

    p = sub.add_parser("sweep", parents=[common], help="run the orphan sweeper",
                       description="The orphan sweeper, a process of its own (it must outlive "
                                   "the workers it cleans up after).\n\n" + RULES,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    _limits_arg(p, "the sweeper rules: sweeper.interval_s, lease_s, max_pending_age_s")
    p.add_argument("--every", type=_period, default=None, metavar="S",
                   help="seconds between passes (the limits' sweeper.interval_s, else 60)")
    p.add_argument("--once", action="store_true", help="one pass, then exit")
    p.add_argument("--lease", type=_period, default=None, metavar="S",
                   help=f"a RUNNING task not renewed for this long is orphaned (the limits' "
                        f"sweeper.lease_s, else {DEFAULT_LEASE_S:g}; must match the workers')")
    p.add_argument("--max-pending-age", type=_duration, default=None, metavar="S",
                   help="cancel PENDING tasks waiting longer than this, since they last "
                        "became PENDING (the limits' sweeper.max_pending_age_s, else never)")
    p.add_argument("--log-json", action="store_true", help="log one JSON object per line")
    p.set_defaults(func=cmd_sweep)


def _add_inspect(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("inspect", parents=[common], help="a task's record and history")
    p.add_argument("target", metavar="TASK_ID_OR_TRACE_ID", type=text_arg,
                   help="a task id, a trace id, or the W3C trace id / traceparent a "
                        "downstream logged")
    p.add_argument("--trace", help="also list the task's events from this trace file")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_inspect)


_WORKER_LIMITS = "workers, fuses, pools, policies; its values win over the app's"


def _limits_arg(p: argparse.ArgumentParser, what: str = _WORKER_LIMITS) -> None:
    p.add_argument("--limits", metavar="FILE", default=os.environ.get("TASKFUSE_LIMITS"),
                   help=f"a limits file ($TASKFUSE_LIMITS): {what}")


# The flags' number types (bounded: taskfuse.core.bounds); every number flag uses one.
_duration, _period = duration_arg, period_arg
_positive_int = number_arg(int, 1, bounds.MAX_INT64)
_non_negative_int = number_arg(int, 0, bounds.MAX_INT64)
_positive_float = positive_float
_non_negative_float = number_arg(float, 0.0, bounds.MAX_DURATION_S, unit=" of seconds")
_workers = number_arg(int, 1, MAX_WORKERS)
_retries = number_arg(int, 0, bounds.MAX_RETRY)
_priority = number_arg(int, bounds.MIN_INT64, bounds.MAX_INT64)
_port = number_arg(int, 0, 65_535)


# -- shared helpers ------------------------------------------------------------------------


def load_app(ref: str | None) -> App:
    """Import `module:object` (from the current directory too) and check it is an App."""
    if not ref:
        raise CliError("no app given: pass --app module:object or set TASKFUSE_APP")
    module_name, _, attr = ref.partition(":")
    if not module_name or not attr:
        raise CliError(f"--app must look like module:object, got {ref!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise CliError(f"cannot import app module {module_name!r}: {exc}") from None
    app = getattr(module, attr, None)
    if not isinstance(app, App):
        found = "nothing" if app is None else type(app).__name__
        raise CliError(f"{ref!r} is not a taskfuse App (found {found})")
    return app


def load_limits_arg(path: str | None, for_worker: bool = False,
                    app: App | None = None) -> Limits | None:
    """The limits file of `--limits` (None without one); every problem is one line.

    A worker refuses `workers: unbounded`: that is the lab's open loop (a task starts the
    moment it arrives), and a worker process runs a fixed number of threads.
    With an `app`, a kind under `kinds:` that the app does not define is refused, not
    ignored: a misspelt kind would leave the real one on its defaults (the timeout and
    retries the file was written to set) without a word, the failure strict keys exist to
    prevent. A fleet whose apps run different kinds gives each its own file.
    """
    if not path:
        return None
    doc, lines = read_limits_document(path)
    limits = Limits.model_validate(doc)
    unknown = sorted(set(limits.kinds) - set(app.tasks)) if app is not None else []
    if unknown:
        known = ", ".join(sorted(app.tasks)) or "none"  # type: ignore[union-attr]
        raise ConfigError(located(path, lines, ("kinds", unknown[0]),
                                  f"the app defines no kind {unknown[0]!r} (its kinds: "
                                  f"{known})"))
    if for_worker and limits.workers == "unbounded":
        raise ConfigError(located(path, lines, ("workers",), "'unbounded' is the lab's open "
                                  "loop; a worker runs a fixed number of threads: set a "
                                  "number here, or pass --workers N"))
    return limits


def parse_payload(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"--payload is not valid JSON ({exc.msg} at column {exc.colno}): "
                       f"{_quoted(text)}") from None
    except RecursionError:
        raise CliError(f"--payload is nested too deep to read: {_quoted(text)}") from None
    except ValueError as exc:  # an integer beyond Python's conversion limit
        raise CliError(f"--payload cannot be read: {' '.join(str(exc).split()[:8])}...: "
                       f"{_quoted(text)}") from None


def _quoted(text: str) -> str:
    """A user's text in a message: whole when short, else its start and its length."""
    return repr(text) if len(text) <= 80 else f"{text[:60]!r}... ({len(text)} characters)"


def record_json(task: Task) -> dict[str, Any]:
    """A task record as JSON-ready data (statuses as their strings)."""
    out = dataclasses.asdict(task)
    out["status"] = task.status.value
    out["depends_on"] = list(task.depends_on)
    out["downstreams"] = list(task.downstreams)
    return out


def _when(t: float | None) -> str:
    if t is None:
        return "-"
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str))


def _install_stop_handlers(first: Callable[[str], None]) -> Callable[[], None]:
    """SIGTERM/SIGINT: the first calls `first(name)`, a second exits at once.

    Returns a function restoring the previous handlers. Outside the main thread (a test
    calling main()) signals cannot be handled, and nothing is installed.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    seen: list[str] = []

    def handle(signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        if seen:  # in the log's format, but not through logging: its locks may be held
            sys.stderr.write(logs.line(logging.WARNING, f"{PROG}: second {name}: exiting now")
                             + "\n")
            sys.stderr.flush()
            os._exit(128 + signum)
        seen.append(name)
        first(name)

    previous = {s: signal.signal(s, handle) for s in (signal.SIGTERM, signal.SIGINT)}

    def restore() -> None:
        for signum, old in previous.items():
            signal.signal(signum, old)

    return restore


@contextmanager
def _logging(args: argparse.Namespace, capture_stdout: bool = False) -> Iterator[None]:
    """While a long-running command (worker, sweep) runs, every line the process prints goes
    to stderr in one format, text or --log-json, credentials masked: ours, the libraries'
    (psycopg), warnings and exceptions that end a thread (`logs.process_logging`), and with
    `capture_stdout` (the worker) what its tasks print. The command owns the process; the
    library alone (`logs.configure`) touches none of this."""
    level = logging.DEBUG if args.verbose else logging.INFO
    with logs.process_logging(level, bool(getattr(args, "log_json", False)),
                              capture_stdout=capture_stdout):
        yield


# -- worker --------------------------------------------------------------------------------


def cmd_worker(args: argparse.Namespace) -> int:
    """Run until SIGTERM/SIGINT (or until drained with --drain), then shut down gracefully."""
    from taskfuse.runtime.threads import Runner

    app = load_app(args.app)
    limits = load_limits_arg(args.limits, for_worker=args.workers is None, app=app)
    if limits is not None:
        app.configure(limits)
        app.limits_file = args.limits
    overrides: dict[str, Any] = {}
    if args.workers is not None:
        overrides["workers"] = args.workers
    if args.lease is not None:
        overrides["sweeper"] = {"lease_s": args.lease}
    if overrides:
        app.configure(Limits.model_validate(overrides))
    if args.workers is None and "workers" not in app.limits.model_fields_set:
        app.configure(Limits(workers=4))  # the command's default when nothing says
    workers = app.limits.workers
    if not isinstance(workers, int):
        raise CliError(f"{args.app}: workers 'unbounded' is the lab's open loop; a worker "
                       "runs a fixed number of threads: pass --workers N")
    stop = threading.Event()
    signals: list[str] = []

    def first(name: str) -> None:
        log.info("%s: finishing running tasks (grace %gs); send again to exit now", name,
                 args.grace)
        signals.append(name)
        stop.set()

    with _logging(args, capture_stdout=True), opened_store(args.store) as store:
        runner = Runner(app, store, workers=workers, worker_id=args.worker_id,
                        trace=args.trace, trace_interval_s=args.trace_interval)
        server = _serve_metrics(runner, args)
        restore = _install_stop_handlers(first)
        try:
            _run_worker(runner, args, stop)
        finally:
            restore()
            if server is not None:
                server.close()
    if runner.store_full is not None:  # a drain that cannot finish (said once, as it came)
        return 1
    return _exit_status(signals)


def _exit_status(signals: list[str]) -> int:
    """After a graceful stop: 130 when a person pressed Ctrl-C (SIGINT), 0 for SIGTERM (a
    service manager's normal stop) or when the work simply ended."""
    return EXIT_INTERRUPTED if signals[:1] == ["SIGINT"] else 0


def _serve_metrics(runner: Runner, args: argparse.Namespace) -> MetricsServer | None:
    """Start the Prometheus endpoint (before the runner, so no event is missed), if asked."""
    if args.metrics_port is None:
        return None
    from taskfuse.observe.prometheus import serve_runner

    server = serve_runner(runner, args.metrics_port, args.metrics_addr)
    log.info("metrics at http://%s:%d/metrics", args.metrics_addr, server.port)
    return server


def _run_worker(runner: Any, args: argparse.Namespace, stop: threading.Event) -> None:
    with worker_heap():  # this process is the worker's own (taskfuse.tuning)
        runner.start()
        _serve_until_stopped(runner, args, stop)


def _serve_until_stopped(runner: Any, args: argparse.Namespace, stop: threading.Event) -> None:
    kinds = [f"{kind} [process]" if runner.app.definition(kind).executor == "process"
             else kind for kind in sorted(runner.app.tasks)]
    log.info("worker %s started: %d threads on %s, kinds %s", runner.worker_id, runner.workers,
             redact_url(args.store), ", ".join(kinds) or "none")
    source = f"from {args.limits}" if args.limits else "(no limits file)"
    log.info("limits %s: %s", source, runner.app.describe())
    try:
        if args.drain:  # until done, or until the store cannot take what is done
            while (not stop.is_set() and not runner.join(timeout=0.5)
                   and runner.store_full is None):
                pass
        else:
            stop.wait()
    finally:
        released = runner.shutdown(grace_s=args.grace)
        log.info("worker %s stopped: %d done here, %d released to PENDING, %d late results "
                 "discarded", runner.worker_id, runner.stats.completed, len(released),
                 runner.stats.discarded)


# -- submit --------------------------------------------------------------------------------


def cmd_submit(args: argparse.Namespace) -> int:
    payload = parse_payload(args.payload)
    if args.cap is not None and not args.batch:
        raise CliError("--cap needs --batch: the cap belongs to a batch")
    app = load_app(args.app) if args.app else App()
    limits = load_limits_arg(args.limits, app=app if args.app else None)
    if limits is not None:
        app.configure(limits)
    fields: dict[str, Any] = {
        "idempotency_key": args.key, "depends_on": tuple(args.depends_on),
        "task_id": args.task_id, "trace_id": _caller_trace_id(args.trace_id),
    }
    for name in ("priority", "timeout", "max_retry"):
        if getattr(args, name) is not None:
            fields[name] = getattr(args, name)
    if args.app:
        spec = app.spec(args.kind, payload, batch_id=args.batch, **fields)
    else:
        spec = TaskSpec(args.kind, payload, batch_id=args.batch, **fields)
    with opened_store(args.store) as store:
        sched = app.scheduler(store)
        now = time.time()
        [task] = app.submit_to(sched, [spec], now, args.batch)
        created = task.created_at == now
        if args.batch and created:
            # the batch only once its task is in: a known key answers with its task and
            # leaves no empty batch behind (one task alone cannot run past a cap)
            limits = app.limits.batch(args.batch)
            cap = args.cap if args.cap is not None else (limits.cap if limits else None)
            store.put_batch(Batch(args.batch, cap, now))
    if args.json:
        _print_json({"created": created, "task": record_json(task)})
    elif created:
        batch = f" batch={task.batch_id}" if task.batch_id else ""
        print(shown(f"submitted {task.task_id} kind={task.kind}{batch} "
                    f"trace_id={task.trace_id}"))
    else:
        print(shown(f"exists {task.task_id} (idempotency key {args.key!r}) "
                    f"status={task.status.value}"))
    return 0


# -- status --------------------------------------------------------------------------------


def cmd_status(args: argparse.Namespace) -> int:
    with opened_store(args.store) as store:
        if args.batch:
            rows = [_batch_row(store, args.batch, must_exist=True)]
            total = None
        else:
            rows = [_batch_row(store, b) for b in sorted(store.batch_ids())]
            total = _counts_json(store.counts())
        workers = [] if args.batch else _live_workers(store)
        schedules = [] if args.batch else _schedules(store, args)
    if args.json:
        _print_json(rows[0] if args.batch else {"counts": total, "batches": rows,
                                                "workers": [w._asdict() for w in workers],
                                                "schedules": schedules})
        return 0
    _print_table(rows, total)
    _print_workers(workers)
    _print_schedules(schedules)
    return 0


def _schedules(store: Store, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The schedules of --app and --limits (none without them), with their next tick."""
    if not args.app and not args.limits:
        return []
    from taskfuse.runtime.schedules import schedule_rows

    app = load_app(args.app) if args.app else App()
    limits = load_limits_arg(args.limits)
    if limits is not None:
        app.configure(limits)
    return schedule_rows(app.schedules, store, time.time())


def _print_schedules(rows: list[dict[str, Any]]) -> None:
    """One line per schedule: its rule, its next tick, its latest tick's batch."""
    if not rows:
        return
    print()
    head = ["SCHEDULE", "CRON", "TZ", "MISSED", "NEXT TICK", "LAST BATCH", "STATUS"]
    lines = [[r["schedule"], r["cron"], r["tz"], r["missed"], r["next_tick"] or "never",
              r["last_batch"] or "-", r["last_status"] or "-"] for r in rows]
    print("\n".join(columns(head, lines, ["left"] * len(head))))


def _live_workers(store: Store) -> list[Any]:
    """The workers' own last beats (threads, busy, stuck threads by kind), running ones."""
    try:
        return [w for w in store.workers() if not w.stopped]
    except Exception:  # a store whose schema predates worker beats: nothing to add
        return []


def _print_workers(workers: list[Any]) -> None:
    """One line per running worker process: threads, busy, and threads stuck on a task that
    is no longer RUNNING (it ignored its timeout or cancel), by kind."""
    if not workers:
        return
    now = time.time()
    print()
    head = ["WORKER", "THREADS", "BUSY", "STUCK", "DONE", "ERRORS", "BEAT"]
    lines = []
    for w in workers:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(w.stuck_kinds.items()))
        lines.append([w.worker_id, str(w.threads), str(w.busy),
                      f"{w.stuck} ({kinds})" if w.stuck else "0", str(w.completed),
                      str(w.failed), f"{max(0.0, now - w.beat_at):.0f}s ago"])
    print("\n".join(columns(head, lines, ["left", *["right"] * (len(head) - 1)])))




def _caller_trace_id(text: str | None) -> str | None:
    """The trace_id a caller passed (a traceparent continues its trace), or None."""
    if text is None:
        return None
    from taskfuse.observe.traceparent import TraceparentError, trace_id_from

    try:
        return trace_id_from(text)
    except TraceparentError as exc:
        raise CliError(f"--trace-id: {exc}") from None


def _counts_json(counts: dict[TaskStatus, int]) -> dict[str, int]:
    return {s.value: int(counts.get(s, 0)) for s in STATUS_ORDER}


def _batch_row(store: Store, batch_id: str, must_exist: bool = False) -> dict[str, Any]:
    counts = store.counts(batch_id)
    batch = store.get_batch(batch_id)
    if must_exist and batch is None and not any(counts.values()):
        raise CliError(f"unknown batch {batch_id!r}")
    return {
        "batch_id": batch_id,
        "status": derive_batch_status(counts).value,
        "cap": batch.cap if batch is not None else None,
        "total": sum(counts.values()),
        "counts": _counts_json(counts),
    }


def _print_table(rows: list[dict[str, Any]], total: dict[str, int] | None) -> None:
    head = ["BATCH", "STATUS", "CAP", "TOTAL", *(s.value for s in STATUS_ORDER)]
    lines = [[r["batch_id"], r["status"], "-" if r["cap"] is None else str(r["cap"]),
              str(r["total"]), *(str(r["counts"][s.value]) for s in STATUS_ORDER)]
             for r in rows]
    if total is not None:
        lines.append(["(all tasks)", "", "", str(sum(total.values())),
                      *(str(total[s.value]) for s in STATUS_ORDER)])
    print("\n".join(columns(head, lines, ["left", "left", *["right"] * (len(head) - 2)])))


# -- cancel --------------------------------------------------------------------------------


def cmd_cancel(args: argparse.Namespace) -> int:
    """Cancel a task (else a batch of that id); 1 when it had already ended."""
    with opened_store(args.store) as store:
        sched = App().scheduler(store)
        now = time.time()
        task = store.get(args.target)
        if task is not None:
            return _cancel_task(sched, task, now, args.reason)
        if store.get_batch(args.target) is None and not any(store.counts(args.target).values()):
            raise CliError(f"no task or batch with id {args.target!r}")
        n = sched.cancel_batch(args.target, now, args.reason)
    if n == 0:
        print(f"batch {shown(args.target)} has no unfinished task; nothing to cancel")
        return 1
    print(f"canceled {n} unfinished task(s) of batch {shown(args.target)}")
    return 0


def _cancel_task(sched: Scheduler, task: Task, now: float, reason: str) -> int:
    if task.status in TERMINAL:
        print(f"task {shown(task.task_id)} already ended {task.status.value}; nothing to "
              "cancel")
        return 1
    moved = sched.cancel(task.task_id, now, reason)
    if moved is None:  # it ended between our read and the cancel
        current = sched.store.get(task.task_id)
        status = current.status.value if current is not None else "gone"
        print(f"task {shown(task.task_id)} already ended {status}; nothing to cancel")
        return 1
    note = " (its worker will see ctx.cancelled())" if task.status is TaskStatus.RUNNING else ""
    print(f"canceled {shown(task.task_id)} (was {task.status.value}){note}")
    return 0


# -- sweep ---------------------------------------------------------------------------------


def cmd_sweep(args: argparse.Namespace) -> int:
    from taskfuse.runtime.sweeper import run_sweeper, sweeper_scheduler

    limits = load_limits_arg(args.limits)
    rules = limits.sweeper if limits is not None else None
    every = _pick(args.every, rules and rules.interval_s, 60.0)
    lease = args.lease if args.lease is not None else (
        rules.lease_s if rules is not None else DEFAULT_LEASE_S)
    max_age = _pick(args.max_pending_age, rules and rules.max_pending_age_s, None)
    stop = threading.Event()
    signals: list[str] = []

    def first(name: str) -> None:
        signals.append(name)
        stop.set()

    with _logging(args), opened_store(args.store) as store:
        sched = sweeper_scheduler(store, lease_s=lease, max_pending_age_s=max_age)
        restore = _install_stop_handlers(first)
        try:
            if not args.once:
                log.info("sweeper started on %s: every %gs, lease %s, max pending age %s",
                         redact_url(args.store), every, _secs(lease), _secs(max_age))
            moved = run_sweeper(sched, every_s=every, once=args.once, stop=stop,
                                retention_s=rules.retention_s if rules is not None else None)
        finally:
            restore()
    print(f"swept {moved} task(s)")
    return _exit_status(signals)


def _pick(*values: Any) -> Any:
    """The first value that is not None: the flag, then the limits file, then the default."""
    return next((v for v in values if v is not None), None)


def _secs(value: float | None) -> str:
    return "none" if value is None else f"{value:g}s"


# -- inspect -------------------------------------------------------------------------------


def cmd_inspect(args: argparse.Namespace) -> int:
    with opened_store(args.store) as store:
        tasks = find_tasks(store, args.target)
    if not tasks:
        raise CliError(f"no task with id or trace_id {args.target!r}")
    ids = [t.task_id for t in tasks]
    events = _trace_events(args.trace, ids) if args.trace else None
    if args.json:
        _print_json({"tasks": [record_json(t) for t in tasks], "events": events})
        return 0
    for i, task in enumerate(tasks):
        if i:
            print()
        _print_record(task)
    if events is not None:
        print(f"\nevents from {args.trace}:")
        for e in events:
            _print_event(e)
    return 0


def find_tasks(store: Store, target: str) -> list[Task]:
    """Tasks by task id or trace_id, or by the W3C form a downstream logged.

    A 32-hex W3C trace id (or a whole traceparent value) finds the task whose trace_id it
    was derived from (taskfuse.observe.traceparent), so an id copied from a partner's logs
    leads back to the task.
    """
    tasks = store.find(target)
    if tasks:
        return tasks
    from taskfuse.observe.traceparent import TraceparentError, parse, task_trace_ids

    try:
        w3c_id = parse(target).trace_id
    except TraceparentError:
        w3c_id = target
    for candidate in task_trace_ids(w3c_id):
        if candidate != target and (tasks := store.find(candidate)):
            return tasks
    return []


def _print_record(task: Task) -> None:
    data = record_json(task)
    width = max(len(k) for k in data)
    for key, value in data.items():
        if key in ("created_at", "started_at", "finished_at", "not_before", "heartbeat_at",
                   "pending_since", "operator_retried_at"):
            value = _when(value)
        elif value is None:
            value = "-"
        elif not isinstance(value, str):
            value = json.dumps(value, default=str)
        print(f"{key.ljust(width)}  {shown(value)}")
    print("history (from the record):")
    for when, what in record_history(task):
        print(f"  {_when(when) if when is not None else '':24}  {shown(what)}")


def _trace_events(path: str, task_ids: list[str]) -> list[dict[str, Any]]:
    from taskfuse.trace import TraceError, read_trace

    try:
        trace = read_trace(path)
    except TraceError as exc:
        raise CliError(str(exc)) from None
    t0 = trace.header.get("meta", {}).get("t0_epoch")
    out = []
    wanted = set(task_ids)
    for event in (e for e in trace.events() if e.task_id in wanted):
        data = event._asdict()
        if t0 is not None:
            data["at"] = _when(t0 + event.t)
        out.append(data)
    return out


def _print_event(e: dict[str, Any]) -> None:
    move = f"{e['src'] or ''} -> {e['dst']}" if e["dst"] else ""
    at = e.get("at") or f"t={e['t']:.3f}s"
    parts = [at, e["kind"], e["task_id"] or "", move, e["reason"] or "",
             f"attempt {e['attempt']}" if e["attempt"] else "", e["worker"] or ""]
    print(shown("  " + "  ".join(p for p in parts if p)))



if __name__ == "__main__":
    sys.exit(main())
