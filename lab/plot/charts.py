"""Pictures for an incident review: a recorded run (`lab plot`) and a sweep (`lab sweep --plot`).

A run is drawn as stacked panels on one shared time axis, because the story of an incident
is a chain across them: the queue grows, workers are all running, the downstream answers
429s or its breaker opens (shaded bands: red open, orange half-open), the pool's waiters
pile up, and business p99 crosses its SLO line. Two runs (`--vs`) are drawn one above the
other with the same y scale per panel where their ranges are alike (within `SHARE_RATIO`), so
"incident vs fixed" is read by eye; where one run's numbers dwarf the other's, each panel
keeps its own scale (a shared one would draw the fixed run flat) and says so. Legends sit
right of their panel, never over a series.

matplotlib is an optional extra (`pip install 'taskfuse[plot]'`); without it every plotting
command fails with one line before any simulation runs. Figures are built with the
object-oriented API (no pyplot global state), so plotting is safe in any process.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lab.scenario import ScenarioError
from taskfuse.trace import BREAKER_CODES, Trace, TraceError, read_trace

_OPEN, _HALF = BREAKER_CODES["open"], BREAKER_CODES["half_open"]
PANEL_IN = 1.55  # inches of height per panel
#: The picture formats `-o` takes (matplotlib writes more; these are the documented ones).
FORMATS = (".png", ".svg", ".pdf")
#: Two runs' panels share a y scale while their peaks are within this factor.
SHARE_RATIO = 5.0


def require_matplotlib() -> None:
    """Fail with one line (exit 2 from the CLI) when the plot extra is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ScenarioError("plotting needs matplotlib: pip install 'taskfuse[plot]'") from None


def _figure(width: float, height: float) -> Any:
    require_matplotlib()
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def check_output(out: str | Path) -> Path:
    """The picture's path, if it can be written: a documented format, in a directory that
    exists (a picture never creates directories). Raises ScenarioError (one line)."""
    path = Path(out)
    if path.suffix.lower() not in FORMATS:
        raise ScenarioError(f"{path}: cannot draw a {path.suffix or 'file without an extension'}"
                            f" picture: use {', '.join(FORMATS[:-1])} or {FORMATS[-1]}")
    parent = path.parent
    if not parent.is_dir():
        raise ScenarioError(f"{path}: no such directory {str(parent)!r} (it is not created)")
    return path


def _save(fig: Any, out: str | Path) -> Path:
    path = check_output(out)
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot write the picture: {exc.strerror}") from None
    except ValueError as exc:
        raise ScenarioError(f"{path}: {exc}") from None
    return path


# -- a recorded run ------------------------------------------------------------------------


def _has(trace: Trace, name: str) -> bool:
    return name in trace.columns and bool(np.isfinite(trace.columns[name]).any())


def _panels(trace: Trace) -> list[str]:
    """The panels this trace has data for (a reader tolerates missing series)."""
    meta = trace.header.get("meta", {})
    kinds = [k for k, name in (("queue", "queue_depth"), ("running", "running"))
             if name in trace.columns]
    if any(f"ds.{n}.rps" in trace.columns for n in meta.get("downstreams", [])):
        kinds.append("downstreams")
    if any(f"pool.{n}.waiting" in trace.columns for n in meta.get("pools", [])):
        kinds.append("pools")
    if _has(trace, "biz.p99"):
        kinds.append("business")
    return kinds


def _spans(t: np.ndarray, mask: np.ndarray, dt: float) -> list[tuple[float, float]]:
    """Contiguous stretches where mask holds, as (start, end) times."""
    spans: list[tuple[float, float]] = []
    start = None
    for i, on in enumerate(mask):
        if on and start is None:
            start = t[i] - dt
        elif not on and start is not None:
            spans.append((start, t[i - 1]))
            start = None
    if start is not None:
        spans.append((start, t[-1]))
    return spans


def _bands(ax: Any, t: np.ndarray, codes: np.ndarray, dt: float) -> bool:
    """Shade breaker-open (red) and half-open (orange) stretches; True if any."""
    drawn = False
    for code, color in ((_OPEN, "tab:red"), (_HALF, "tab:orange")):
        for a, b in _spans(t, codes == code, dt):
            ax.axvspan(a, b, color=color, alpha=0.16, lw=0)
            drawn = True
    return drawn


def _band_legend(ax: Any) -> list[Any]:
    from matplotlib.patches import Patch

    return [Patch(color="tab:red", alpha=0.3, label="breaker open"),
            Patch(color="tab:orange", alpha=0.3, label="half-open")]


def _legend(ax: Any, extra: Sequence[Any] = ()) -> None:
    """Right of the panel, outside it: a legend inside would cover spikes (retry storms)."""
    handles, _ = ax.get_legend_handles_labels()
    handles = [*handles, *extra]
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0),
                  borderaxespad=0.0, fontsize=7, frameon=False)


def _draw_queue(ax: Any, tr: Trace, dt: float) -> None:
    t, q = tr.series("queue_depth")
    ax.fill_between(t, q, step="pre", color="tab:blue", alpha=0.25, lw=0)
    ax.plot(t, q, color="tab:blue", lw=1.2, drawstyle="steps-pre", label="queue depth")
    ax.set_ylabel("tasks\nwaiting")
    _legend(ax)


def _draw_running(ax: Any, tr: Trace, dt: float) -> None:
    t, running = tr.series("running")
    if _has(tr, "running_limit"):
        ax.plot(t, tr.columns["running_limit"], color="0.35", lw=2.6, alpha=0.45,
                drawstyle="steps-pre", label="limit (workers)")
    ax.plot(t, running, color="tab:green", lw=1.2, drawstyle="steps-pre", label="running")
    ax.set_ylabel("tasks\nrunning")
    _legend(ax)


def _draw_downstreams(ax: Any, tr: Trace, dt: float) -> None:
    banded = False
    names = [n for n in tr.header["meta"]["downstreams"] if f"ds.{n}.rps" in tr.columns]
    for name in names:
        t, rps = tr.series(f"ds.{name}.rps")
        line = ax.plot(t, rps, lw=1.2, label=f"{name} requests/s")[0]
        r429 = tr.columns.get(f"ds.{name}.r429")
        if r429 is not None and np.nanmax(r429, initial=0) > 0:
            per_s = np.diff(np.nan_to_num(r429), prepend=0.0) / dt
            # one downstream: 429s in red; several: each in its own line's colour
            color = "tab:red" if len(names) == 1 else line.get_color()
            ax.bar(t, per_s, width=dt, align="edge", color=color, alpha=0.55,
                   label=f"{name} 429/s")
        errors = tr.columns.get(f"ds.{name}.errors")
        if errors is not None and np.nanmax(errors, initial=0) > 0:
            per_s = np.diff(np.nan_to_num(errors), prepend=0.0) / dt
            ax.plot(t, per_s, color=line.get_color(), lw=0.8, ls=":",
                    label=f"{name} errors+timeouts/s")
        line.set_zorder(3)
        if _has(tr, f"ds.{name}.breaker"):
            banded |= _bands(ax, t, tr.columns[f"ds.{name}.breaker"], dt)
    ax.set_ylabel("downstream\nreq/s")
    _legend(ax, _band_legend(ax) if banded else ())


def _draw_pools(ax: Any, tr: Trace, dt: float) -> None:
    for name in tr.header["meta"]["pools"]:
        if f"pool.{name}.waiting" not in tr.columns:
            continue
        t, waiting = tr.series(f"pool.{name}.waiting")
        line = ax.plot(t, waiting, lw=1.6, drawstyle="steps-pre", zorder=4,
                       label=f"{name} waiting")[0]
        color = line.get_color()
        # A full pool has in use == size: the size is a wide pale line underneath, in use a
        # filled area with its own line on top, so both stay visible when they coincide.
        if f"pool.{name}.size" in tr.columns:
            ax.plot(t, tr.columns[f"pool.{name}.size"], lw=3.2, ls="--", color=color,
                    alpha=0.35, drawstyle="steps-pre", zorder=2, label=f"{name} size")
        if f"pool.{name}.in_use" in tr.columns:
            in_use = tr.columns[f"pool.{name}.in_use"]
            ax.fill_between(t, in_use, step="pre", color=color, alpha=0.12, lw=0, zorder=1)
            ax.plot(t, in_use, lw=1.0, ls=":", color=color, drawstyle="steps-pre", zorder=3,
                    label=f"{name} in use")
    ax.set_ylabel("DB pool\nconnections")
    _legend(ax)


def _draw_business(ax: Any, tr: Trace, dt: float) -> None:
    t, p99 = tr.series("biz.p99")
    ax.plot(t, p99, color="tab:purple", lw=1.2, label="business p99")
    if _has(tr, "biz.slo_p99"):
        slo = float(np.nanmax(tr.columns["biz.slo_p99"]))
        ax.axhline(slo, color="tab:red", ls="--", lw=1, label=f"SLO {slo:g} s")
    banded = _has(tr, "biz.breaker") and _bands(ax, t, tr.columns["biz.breaker"], dt)
    ax.set_yscale("log")
    ax.set_ylabel("business\np99 (s)")
    _legend(ax, _band_legend(ax) if banded else ())


_DRAW = {"queue": _draw_queue, "running": _draw_running, "downstreams": _draw_downstreams,
         "pools": _draw_pools, "business": _draw_business}


def _title(tr: Trace) -> str:
    """Name, seed and the verdict a reviewer wants first; a real run's trace has no scenario
    or seed and its own report, so every key is optional."""
    name = tr.header.get("scenario") or f"{tr.header.get('source', 'run')} {tr.path.name}"
    seed = tr.header.get("seed")
    head = name if seed is None else f"{name}  seed {seed}"
    r = tr.report
    if r is None:
        return f"{head}  (incomplete run)"
    parts = [f"makespan {r['makespan_s']:g} s"] if r.get("makespan_s") is not None else []
    biz = r.get("business") or {}
    if biz.get("p99_s") is not None:
        parts.append(f"business p99 {biz['p99_s']:g} s")
    if biz.get("timeouts"):
        parts.append(f"{biz['timeouts']} gateway timeouts")
    n429 = sum(d.get("rejected_429", 0) for d in (r.get("downstreams") or {}).values())
    if n429:
        parts.append(f"{n429} x 429")
    slo = r.get("slo") or {}
    if "ok" in slo:
        parts.append("SLO kept" if slo["ok"] else "SLO BROKEN")
    return f"{head}:  " + ",  ".join(parts) if parts else head


def _load(path: str | Path) -> Trace:
    try:
        tr = read_trace(path)
    except TraceError as exc:
        raise ScenarioError(str(exc)) from None
    if len(tr.times) == 0:
        raise ScenarioError(f"{path}: the trace has no timeline samples to draw")
    return tr


def plot_traces(paths: Sequence[str | Path], out: str | Path) -> Path:
    """Draw one run, or several one above the other (same panels; y scales shared where the
    runs' ranges are alike)."""
    check_output(out)
    return _save(draw_traces([_load(p) for p in paths]), out)


def draw_traces(traces: Sequence[Trace]) -> Any:
    """The figure of `plot_traces` (tests look at its axes)."""
    kinds = list(dict.fromkeys(k for tr in traces for k in _panels(tr)))
    rows = [(tr, k) for tr in traces for k in kinds]
    fig = _figure(11, 0.6 + PANEL_IN * len(rows))
    axes = fig.subplots(len(rows), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (tr, kind) in zip(axes, rows, strict=True):
        dt = float(tr.header.get("sample_interval_s") or 1.0)
        if kind in _panels(tr):
            _DRAW[kind](ax, tr, dt)
        else:
            ax.text(0.5, 0.5, "not in this run", ha="center", va="center",
                    transform=ax.transAxes, color="grey")
        ax.grid(True, alpha=0.3)
        ax.tick_params(labelsize=8)
    for i, tr in enumerate(traces):
        axes[i * len(kinds)].set_title(_title(tr), fontsize=10, loc="left")
    _share_y(axes, len(traces), len(kinds))
    axes[-1].set_xlabel("time (s)")
    axes[-1].set_xlim(left=0)
    return fig


def _share_y(axes: Sequence[Any], runs: int, kinds: int) -> None:
    """The same y range for a panel kind across runs, so heights compare by eye, unless one
    run's peak is more than SHARE_RATIO times another's: the smaller run would be drawn flat,
    so each keeps its own scale and the panel says so. Log panels always share."""
    if runs < 2:
        return
    for k in range(kinds):
        group = [axes[r * kinds + k] for r in range(runs)]
        lows, highs = zip(*(ax.get_ylim() for ax in group), strict=True)
        peaks = [h for h in highs if h > 0]
        alike = not peaks or max(peaks) <= SHARE_RATIO * min(peaks)
        if alike or group[0].get_yscale() == "log":
            for ax in group:
                ax.set_ylim(min(lows), max(highs))
            continue
        for k_run, (ax, high) in enumerate(zip(group, highs, strict=True)):
            other = max(h for j, h in enumerate(highs) if j != k_run)
            ax.text(0.995, 0.97, f"own y scale (the other run's goes to {other:.3g})",
                    transform=ax.transAxes, ha="right", va="top", fontsize=7, color="0.35")
            if high <= 0:
                ax.set_ylim(top=1)


# -- a sweep -------------------------------------------------------------------------------


def plot_sweep(keys: Sequence[str], rows: Sequence[Any], metrics: Sequence[str],
               out: str | Path, title: str = "") -> Path:
    """One axis: a line per metric with its 95 % band; two: a heatmap per metric; more: a
    line per combination of the other axes against the first."""
    check_output(out)
    return _save(draw_sweep(keys, rows, metrics, title), out)


def draw_sweep(keys: Sequence[str], rows: Sequence[Any], metrics: Sequence[str],
               title: str = "") -> Any:
    """The figure of `plot_sweep` (tests look at its axes)."""
    cols = min(2, len(metrics))
    nrows = math.ceil(len(metrics) / cols)
    fig = _figure(6.2 * cols, 0.5 + 3.6 * nrows)
    axes = fig.subplots(nrows, cols, squeeze=False).ravel()
    for ax, metric in zip(axes, metrics, strict=False):
        if len(keys) == 2:
            _heatmap(fig, ax, keys, rows, metric)
        else:
            _lines(ax, keys, rows, metric)
        ax.set_title(metric, fontsize=10)
    for ax in axes[len(metrics):]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title, fontsize=11)
    return fig


def _positions(values: Sequence[Any]) -> tuple[list[float], list[str] | None]:
    """Numbers stay numbers on the x axis; anything else is placed by position."""
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return [float(v) for v in values], None
    return list(map(float, range(len(values)))), [str(v) for v in values]


def _key(value: Any) -> str:
    """Axis values may be mappings (`{rate: 90}`): group and look up by their JSON."""
    return json.dumps(value, sort_keys=True)


def _lines(ax: Any, keys: Sequence[str], rows: Sequence[Any], metric: str) -> None:
    groups: dict[str, list[Any]] = {}
    for row in rows:
        groups.setdefault(_key(row.point[1:]), []).append(row)
    for members in groups.values():
        rest = members[0].point[1:]
        xs, labels = _positions([r.point[0] for r in members])
        mean = np.array([r.stats[metric].mean for r in members])
        half = np.nan_to_num(np.array([r.stats[metric].half for r in members]))
        lows = np.array([r.stats[metric].lo for r in members])
        name = ", ".join(f"{k}={v}" for k, v in zip(keys[1:], rest, strict=True))
        ax.plot(xs, mean, marker="o", ms=3, lw=1.3, label=name or None)
        # A metric never seen below zero (counts, seconds) gets no band below zero: the t
        # interval is symmetric, the quantity is not.
        floor = 0.0 if np.nanmin(lows, initial=0.0) >= 0 else -np.inf
        ax.fill_between(xs, np.maximum(mean - half, floor), mean + half, alpha=0.2, lw=0)
        if labels is not None:
            ax.set_xticks(xs, labels)
    ax.set_xlabel(keys[0])
    ax.grid(True, alpha=0.3)
    if len(groups) > 1:
        ax.legend(fontsize=7)


def _heatmap(fig: Any, ax: Any, keys: Sequence[str], rows: Sequence[Any], metric: str) -> None:
    ys = {_key(r.point[0]): r.point[0] for r in rows}
    xs = {_key(r.point[1]): r.point[1] for r in rows}
    y_at, x_at = {k: i for i, k in enumerate(ys)}, {k: i for i, k in enumerate(xs)}
    grid = np.full((len(ys), len(xs)), np.nan)
    for r in rows:
        grid[y_at[_key(r.point[0])], x_at[_key(r.point[1])]] = r.stats[metric].mean
    image = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis", norm=_norm(grid))
    fig.colorbar(image, ax=ax, shrink=0.85)
    ax.set_xticks(range(len(xs)), [str(x) for x in xs.values()], fontsize=7)
    ax.set_yticks(range(len(ys)), [str(y) for y in ys.values()], fontsize=7)
    ax.set_xlabel(keys[1])
    ax.set_ylabel(keys[0])
    if grid.size <= 150:
        for (i, j), value in np.ndenumerate(grid):
            if not math.isnan(value):
                dark = float(image.norm(value)) < 0.6  # viridis is dark at the low end
                ax.text(j, i, f"{value:.3g}", ha="center", va="center", fontsize=6,
                        color="white" if dark else "black")


def _norm(grid: np.ndarray) -> Any:
    """A log colour scale when a positive metric spans two decades (latency from 40 ms to
    5 s), so the region that matters is not one flat colour."""
    from matplotlib.colors import LogNorm, Normalize

    finite = grid[np.isfinite(grid)]
    if finite.size and finite.min() > 0 and finite.max() / finite.min() >= 100:
        return LogNorm(finite.min(), finite.max())
    return Normalize()
