"""The console reads what a page shows (#33): ``/alerts`` paginates in a stable order, and a page
reads the spool's records of what it shows only (a spy over ``Spool.read`` counts them), never
the whole spool; the engine state is loaded once per save, and not at all for a page without it.

The spool holds two days of one simulated node pair's snapshots (the simulator's, one a minute)
and alert transitions the engine wrote (tests/fixtures/engine_golden.jsonl's memory-leak alert,
made into 45 open ones and 5 resolved); the console is the real Starlette app, in process.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from gpuwarden.app.settings import load_settings
from gpuwarden.app.standalone import SIM_STATE, STATE_NS
from gpuwarden.app.web import build_app
from gpuwarden.app.webspool import SpoolReader
from gpuwarden.app.webstate import ALERTS_PER_PAGE
from gpuwarden.contract import AlertState, AlertTransition, NodeSnapshot, Topics, decode, encode
from gpuwarden.producers.simulator import Simulator
from gpuwarden.spool import Spool
from gpuwarden.streams.engine import Engine
from gpuwarden.streams.rules import load_rules

REPO = Path(__file__).resolve().parents[2]
NOW = 1_800_000_000.0
DAY = 86400.0
OPEN, RESOLVED = 45, 5
TOPICS = Topics()


def _template() -> AlertTransition:
    for line in (REPO / "tests" / "fixtures" / "engine_golden.jsonl").read_text().splitlines():
        name, _, rest = line.partition(" ")
        if name == "memory-leak" and rest.startswith("{"):
            return decode(rest, AlertTransition)
    raise AssertionError("no memory-leak alert in the golden file")


def _alerts() -> list[AlertTransition]:
    """50 alerts fired over the last 5 h (5 of them resolved since), on two nodes' GPUs."""
    t = _template()
    out = []
    for i in range(OPEN + RESOLVED):
        started = NOW - 5 * 3600 + i * 360
        out.append(t.model_copy(update={"fingerprint": f"{i:020x}", "ts": started, "started_at": started,
                                        "labels": {**t.labels, "node": f"sim-node-0{i % 2}", "gpu": str(i % 4)}}))
    out += [a.model_copy(update={"state": AlertState.RESOLVED, "ts": a.ts + 60, "ended_at": a.ts + 60})
            for a in out[OPEN:]]
    return out


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("pages")
    config = tmp / "gpuwarden.yaml"
    config.write_text(f"spool: {{path: {tmp / 'spool.db'}}}\n")
    sim = Simulator("memory-leak", nodes=2, gpus=4, start_ts=NOW - 2 * DAY, tick_s=60.0)
    snaps = [r for r in sim.step() if isinstance(r, NodeSnapshot)]
    times = [NOW - 2 * DAY + 60 * k for k in range(int(2 * DAY // 60))]
    rows = [(TOPICS.samples, s.node, ts, encode(s.model_copy(update={"ts": ts}))) for ts in times for s in snaps]
    with Spool(tmp / "spool.db") as spool:
        spool.append_many(rows)
        spool.append_many([(TOPICS.alerts, a.fingerprint, a.ts, encode(a)) for a in _alerts()])
    return load_settings(config), tmp / "spool.db", len(rows)


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Records read from the spool, by topic."""
    read = Counter[str]()
    original = Spool.read

    def counted(self, *args, **kwargs):
        for r in original(self, *args, **kwargs):
            read[r.topic] += 1
            yield r

    monkeypatch.setattr(Spool, "read", counted)
    return read


def _shown(html: str) -> list[str]:
    return re.findall(r'<article class="alert[^"]*" id="alert-([0-9a-f]+)"', html)


def test_alerts_paginate_in_a_stable_order(console) -> None:
    settings, _, _ = console
    opened = {a.fingerprint for a in _alerts() if a.state == AlertState.FIRING} - {
        a.fingerprint for a in _alerts() if a.state == AlertState.RESOLVED}
    http = TestClient(build_app(settings))
    first = http.get("/alerts").text
    assert len(_shown(first)) == ALERTS_PER_PAGE
    assert f"alerts 1–{ALERTS_PER_PAGE} of {len(opened)} (page 1 of 3)" in first
    assert 'rel="next" href="/alerts?page=2"' in first and 'rel="prev"' not in first
    pages = [_shown(http.get("/alerts", params={"page": n}).text) for n in (1, 2, 3)]
    assert [len(p) for p in pages] == [20, 20, 5]
    listed = [fp for p in pages for fp in p]
    assert len(listed) == len(set(listed)) and set(listed) == opened  # each open alert on exactly one page
    assert [fp for n in (1, 2, 3) for fp in _shown(http.get(f"/alerts?page={n}").text)] == listed  # same order again
    assert _shown(http.get("/alerts?page=9").text) == pages[2]  # past the end: the last page
    last = pages[2][-1]
    held = http.get("/alerts", params={"alert": last}).text
    assert last in _shown(held) and "(page 3 of 3)" in held and 'rel="prev" href="/alerts?page=2"' in held


def test_a_page_reads_only_what_it_shows(console, spy, monkeypatch: pytest.MonkeyPatch) -> None:
    settings, path, samples = console
    loads = []
    monkeypatch.setattr(Engine, "load_all", lambda self, data: loads.append(len(data)))
    http = TestClient(build_app(settings))  # no lifespan: nothing read before the first page

    assert http.get("/silences").status_code == 200
    assert set(spy) == {TOPICS.alerts} and spy[TOPICS.alerts] == OPEN + 2 * RESOLVED  # the alerts' index, once
    assert loads == []  # no engine for a page that shows none
    spy.clear()

    page = http.get("/alerts").text
    assert 'class="chart"' in page
    assert TOPICS.alerts not in spy  # nothing new since
    # the shown alerts' windows (5 h of 48) of the samples topic, not the topic
    assert 0 < spy[TOPICS.samples] <= samples / 4, (spy, samples)
    spy.clear()

    for p in ("/alerts", "/silences", "/retro", "/alerts?page=2"):
        assert http.get(p).status_code == 200
    assert sum(spy.values()) - spy[TOPICS.samples] == 0  # an unchanged spool: no record read
    page_two = spy[TOPICS.samples]
    spy.clear()

    late = _template().model_copy(update={"fingerprint": "f" * 20, "ts": NOW, "started_at": NOW})
    with Spool(path) as spool:
        spool.append(TOPICS.alerts, encode(late), key=late.fingerprint, ts=late.ts)
    assert late.fingerprint in http.get(f"/alerts?alert={late.fingerprint}").text
    assert spy[TOPICS.alerts] == 1, spy  # the one appended
    assert http.get("/alerts?page=2").status_code == 200 and page_two > 0
    assert loads == []


def test_the_engine_state_is_loaded_once_per_save(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "gpuwarden.yaml"
    config.write_text(f"spool: {{path: {tmp_path / 'spool.db'}}}\n")
    settings = load_settings(config)
    state = Engine(load_rules(settings.engine.rules), settings.engine).dump_all()
    with Spool(tmp_path / "spool.db") as spool:
        spool.kv_put(STATE_NS, SIM_STATE, state)
        spool.kv_put(STATE_NS, SIM_STATE + ":until", repr(NOW).encode())
    loads = []
    load_all = Engine.load_all
    monkeypatch.setattr(Engine, "load_all", lambda self, data: (loads.append(1), load_all(self, data)))
    reader = SpoolReader(settings)
    first = reader.engine()
    assert reader.engine() is first and first.until == NOW and first.which == "simulated GPUs" and len(loads) == 1

    with Spool(tmp_path / "spool.db") as spool:  # gpuwarden run saves again
        spool.kv_put(STATE_NS, SIM_STATE, state)
        spool.kv_put(STATE_NS, SIM_STATE + ":until", repr(NOW + 30).encode())
    assert reader.engine() is first  # the page does not wait: the state before, while the new one loads
    assert reader._reloading is not None
    reader._reloading.join()
    assert reader.engine().until == NOW + 30 and len(loads) == 2
    reader.close()


def test_an_eviction_or_a_new_file_rebuilds_the_indexes(tmp_path: Path) -> None:
    config = tmp_path / "gpuwarden.yaml"
    config.write_text(f"spool: {{path: {tmp_path / 'spool.db'}}}\n")
    alerts = [a for a in _alerts() if a.state == AlertState.FIRING][:3]
    with Spool(tmp_path / "spool.db") as spool:
        spool.append_many([(TOPICS.alerts, a.fingerprint, a.ts - 3 * DAY, encode(a)) for a in alerts])
    reader = SpoolReader(load_settings(config))
    assert set(reader.firing()) == {a.fingerprint for a in alerts}

    with Spool(tmp_path / "spool.db", max_age_s=DAY) as spool:
        assert spool.evict(NOW) == 3  # their records older than a day: gone, and so are the alerts
    assert reader.firing() == {}

    for f in tmp_path.glob("spool.db*"):  # a new spool in its place (a new demo)
        f.unlink()
    with Spool(tmp_path / "spool.db") as spool:
        spool.append(TOPICS.alerts, encode(alerts[0]), key=alerts[0].fingerprint, ts=alerts[0].ts)
    assert set(reader.firing()) == {alerts[0].fingerprint}
    reader.close()
