"""``make demo`` ends with a short summary, with or without a terminal (#33, point 5): at most
100 columns; the alerts that fired by tier, one line each, counted as the spool holds them; the
tiers explained; the baselines that formed; ``gpuwarden web`` next. The fleet reads the same in
the demo's words, the summary, the live view and the console: nodes the scheduler alone knows
are named as such, never drawn as empty GPU tables."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from rich.console import Console
from starlette.testclient import TestClient

from gpuwarden.alert_text import is_update
from gpuwarden.app.run_summary import TIERS, WIDTH
from gpuwarden.app.settings import load_settings
from gpuwarden.app.standalone import SAVED_AT, SIM_STATE, STATE_NS
from gpuwarden.app.web import build_app
from gpuwarden.contract import AlertState, AlertTransition, Topics, decode
from gpuwarden.humantime import moment
from gpuwarden.spool import Spool
from tests.app.terminal_support import screen

GPUWARDEN = Path(sys.executable).with_name("gpuwarden")
FLEET = "3 nodes with 24 GPUs sampled; 5 known only from the scheduler"


def _fired(spool: Path) -> Counter[str]:
    """New alerts per tier (firing, not an update of an open one), as the run left them in its spool."""
    with Spool(spool) as s:
        alerts = [decode(r.value, AlertTransition) for r in s.read(Topics().alerts)]
    return Counter(t.tier.value for t in alerts if t.state == AlertState.FIRING and not is_update(t))


def _check(summary: list[str], spool: Path) -> None:
    assert summary and all(len(line) <= WIDTH for line in summary), summary
    assert summary[0].startswith("Ran 1 h of event time on " + FLEET), summary[0]
    assert TIERS in summary
    fired = _fired(spool)
    tiers = {m[1]: int(m[2]) for line in summary if (m := re.match(r"  (critical|attention|info) +(\d+)  \S", line))}
    assert tiers == dict(fired) and sum(fired.values()) > 0, (tiers, fired)
    assert f"Alerts that fired: {sum(fired.values())}," in "\n".join(summary)
    assert any(re.match(r"Baselines formed: \d+ task classes, median GPU util \S+ \d+ %", line) for line in summary)
    assert any(line.startswith("Next: gpuwarden web --config var/demo/gpuwarden.yaml") for line in summary)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess, tuple[float, float]]:
    """``gpuwarden demo`` for 1 h of event time without a terminal: (its directory, the process, when it
    began and ended)."""
    tmp = tmp_path_factory.mktemp("demo")
    began = time.time()
    done = subprocess.run([str(GPUWARDEN), "demo", "--simulate", "--duration", "1h"], cwd=tmp,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return tmp, done, (began, time.time())


def test_without_a_terminal_the_demo_ends_with_the_summary_alone(demo) -> None:
    tmp, done, _ = demo
    assert "event time 20" not in done.stdout and "╭" not in done.stdout  # no clipped frame
    _check(done.stdout.splitlines(), tmp / "var" / "demo" / "spool.db")
    assert f"simulated GPUs, as asked; {FLEET} (bn-0, bn-1, sn-0, tn-0, tn-1) through" in done.stderr


def test_the_console_counts_the_fleet_as_the_demo_does_and_dates_its_state_by_the_runs_end(demo) -> None:
    """Scheduler-only nodes are named, not drawn as empty GPU tables; "state as of" is when the run
    saved its state (its end), not its simulated clock (which ended where the demo began)."""
    tmp, _, (began, ended) = demo
    settings = load_settings(tmp / "var" / "demo" / "gpuwarden.yaml")
    with Spool(settings.spool.path) as s:
        saved = float(s.kv_get(STATE_NS, SIM_STATE + SAVED_AT))
        until = float(s.kv_get(STATE_NS, SIM_STATE + ":until"))
    assert began <= saved <= ended and until < ended
    with TestClient(build_app(settings)) as client:
        page = client.get("/").text
        queues = client.get("/scheduler").text
    text = " ".join(re.sub(r"<[^>]+>", "", page).split())
    assert "3 nodes with 24 GPUs sampled" in text
    assert "5 known only from the scheduler (bn-0, bn-1, sn-0, tn-0, tn-1)" in text
    assert not re.search(r'id="node-(bn|sn|tn)-', page) and 'id="node-sim-node-02"' in page
    state = " ".join(re.search(r'<p class="state" id="state">(.*?)</p>', page, re.S)[1].split())
    assert f"state as of {moment(saved)}" in state and f"event time up to {moment(until)}" in state, state
    assert "queue wait p50 (jobs that started)" in queues


def test_in_a_terminal_the_summary_follows_the_last_frame_whose_counts_agree(tmp_path: Path) -> None:
    frame, rest = screen(f"{GPUWARDEN} demo --simulate --duration 1h 2>/dev/null", 100, 40, tmp_path)
    assert f"GPUs · {FLEET}" in "\n".join(frame)
    summary = [line.rstrip() for line in rest if line.strip()]
    _check(summary, tmp_path / "var" / "demo" / "spool.db")


def test_a_pane_shows_whole_rows_rendered_once_and_no_blank_lines_under_its_more_line() -> None:
    """One pass: each table row is laid out once (no rich Table re-rendered to find what fits)."""
    from gpuwarden.app import live_view
    from gpuwarden.app.live_view import Fitted

    calls = Counter()
    real = live_view.grid_lines

    def counted(grid, cells, style=None):
        calls[tuple(cells)] += 1
        return real(grid, cells, style)

    rows = [(f"n{i}", str(i), "a few words that wrap " * (i % 3)) for i in range(40)]
    console = Console(file=io.StringIO(), width=60, height=12, color_system=None)
    live_view.grid_lines, saved = counted, live_view.grid_lines
    try:
        console.print(Fitted(rows, ("node", "gpu", "notes"), ("notes",), "GPUs"))
    finally:
        live_view.grid_lines = saved
    lines = console.file.getvalue().splitlines()
    assert 10 <= len(lines) <= 12 and re.fullmatch(r"\+ \d+ more GPUs", lines[-1].strip()), lines
    assert all(n == 1 for n in calls.values()), calls
    assert all(line.strip() for line in lines), lines  # no blank line above or below "+ N more"


def test_a_run_into_an_earlier_runs_spool_says_it_appends_and_the_size_limit_holds(tmp_path: Path) -> None:
    """#33, point 6: re-running appended to the spool without a word, past its limit (598 MB after 4 runs)."""
    config = tmp_path / "c.yaml"
    config.write_text(f"spool: {{path: {tmp_path / 's.db'}, max_bytes: 200KB}}\n")
    said = []
    for start in ("2h ago", "1h ago"):
        done = subprocess.run([str(GPUWARDEN), "run", "--config", str(config), "--simulate", "mixed", "--start", start,
                               "--duration", "30m", "--json"], capture_output=True, text=True, check=True)
        said.append(done.stderr)
    assert "appending to" not in said[0]
    assert f"appending to {tmp_path / 's.db'}" in said[1] and "spool.max_bytes 0.2 MB" in said[1], said[1]
    with Spool(tmp_path / "s.db", max_bytes=200_000) as s:
        assert not s.over_limit() and s.counter("dropped") > 0
