"""``gpuwarden web`` in cluster mode (``web.source: kafka``) against a real broker.

A simulated run's alerts produced to the ``alerts`` topic and its engine state as the stream
workers' changelogs hold it appear on the pages (Starlette's TestClient, and once in Chromium
through a ``gpuwarden web`` process that has no spool of the run), a resolve removes one, a
silence and an ack made in the console are read back from the ``control`` topic with a
consumer of the test's own; empty topics, an unreachable broker and one that dies give a
banner, and the view comes back with the broker.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from starlette.testclient import TestClient

from gpuwarden.app.settings import validate_settings
from gpuwarden.app.standalone import SIM_STATE, STATE_NS, with_simulated_services
from gpuwarden.app.web import build_app
from gpuwarden.contract import AlertState, AlertTransition, Evidence, Tier, Topics
from gpuwarden.history.sources import read_file
from gpuwarden.kafka import kafka_kwargs, produce_records
from gpuwarden.spool import Spool
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.engine import Engine
from gpuwarden.streams.statewire import CLASS_TABLE, INFERENCE_TABLE, NODE_TABLE, SERVICE_TABLE, app_id, \
    changelog_topic, fresh_envelope
from tests.app.web_support import TOKEN_ENV, SimRun, chromium, full_page_shot, shot_dir, simulated_run, web_server
from tests.kafka_support import consume_all, create_topic, produce, unique_topic
from tests.streams_kafka.records import keyed

pytestmark = pytest.mark.kafka


@pytest.fixture(autouse=True)
def _token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
TOKEN = "cluster-t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ENGINE = {"observation_period": "30m", "baseline_refresh": "10m"}  # bands within the run, as make demo


def _config(bootstrap: str, prefix: str) -> dict:
    """The workers' config as the console reads it (their class bands need their observation period)."""
    return {"kafka": {"bootstrap": bootstrap, "topic_prefix": prefix, "partitions": 2}, "engine": ENGINE,
            "notify": {"control": "kafka"}, "web": {"source": "kafka", "token": {"env": TOKEN_ENV}}}


def _alert(fp: str, rule: str, node: str, state: AlertState = AlertState.FIRING) -> AlertTransition:
    now = time.time()
    return AlertTransition(ts=now, fingerprint=fp, rule=rule, tier=Tier.CRITICAL, state=state,
                           labels={"node": node, "gpu": "0", "rule": rule}, started_at=now - 120,
                           ended_at=None if state == AlertState.FIRING else now,
                           summary=f"{rule} on {node}", action="look at it",
                           evidence=Evidence(values={"temp_gpu_c": 91.0}, window_s=60, note="held 60 s"))


@contextmanager
def console(config: dict) -> Iterator[TestClient]:
    with TestClient(build_app(validate_settings(config)), base_url="http://127.0.0.1") as client:
        yield client


def every_alert(client: TestClient) -> str:
    """Every page of ``/alerts``, joined (the console lists 20 alerts a page)."""
    pages = [client.get("/alerts", headers=AUTH).text]
    while 'rel="next"' in pages[-1]:
        pages.append(client.get("/alerts", headers=AUTH, params={"page": len(pages) + 1}).text)
    return "".join(pages)


def until(client: TestClient, path: str, seen: Callable[[str], bool], wait_s: float = 300.0) -> str:
    """The page once ``seen`` holds for it (the view follows the topics in the background);
    ``/alerts``: all its pages. ``wait_s`` only catches a hang (#33)."""
    deadline = time.monotonic() + wait_s
    while True:
        body = every_alert(client) if path == "/alerts" else client.get(path, headers=AUTH).text
        if seen(body) or time.monotonic() > deadline:
            return body
        time.sleep(0.2)


def _worker_tables(tmp_path) -> tuple[SimRun, dict[str, list[tuple[bytes, bytes]]]]:
    """A simulated run's engine state as stream workers checkpoint it: each stage's keys as
    envelopes, per table (what their changelogs hold)."""
    run = simulated_run(tmp_path, f"engine: {json.dumps(ENGINE)}\n")
    engine = Engine(config=with_simulated_services(EngineConfig.model_validate(ENGINE)))
    with Spool(tmp_path / "spool.db") as spool:
        engine.load_all(spool.kv_get(STATE_NS, SIM_STATE))
    return run, {NODE_TABLE: [(n.encode(), fresh_envelope(engine.nodes, n)) for n in engine.nodes.nodes()],
                 CLASS_TABLE: [(c.encode(), fresh_envelope(engine.classes, c)) for c in engine.classes.classes()],
                 INFERENCE_TABLE: [(n.encode(), fresh_envelope(engine.inference, n)) for n in engine.inference.nodes()],
                 SERVICE_TABLE: [(n.encode(), fresh_envelope(engine.services, n)) for n in engine.services.services()]}


def test_alerts_topic_and_worker_tables_drive_the_pages(kafka_bootstrap: str, tmp_path) -> None:
    config = _config(kafka_bootstrap, unique_topic("gw") + ".")
    settings = validate_settings(config)
    topics = Topics(settings.kafka.topic_prefix)
    run, tables = _worker_tables(tmp_path)
    assert run.firing and all(tables.values()), tables.keys()
    asyncio.run(create_topic(kafka_bootstrap, topics.alerts, partitions=2))
    asyncio.run(produce(kafka_bootstrap, topics.alerts,
                        [(fp.encode(), json.dumps(t).encode()) for fp, t in run.firing.items()]))
    for table, records in tables.items():
        changelog = changelog_topic(app_id(settings), table)
        asyncio.run(create_topic(kafka_bootstrap, changelog, partitions=2, config={"cleanup.policy": "compact"}))
        asyncio.run(produce(kafka_bootstrap, changelog, records))
    recorded = [r for r in read_file(tmp_path / "run.jsonl", None, None) if r.ts >= time.time() - 600]
    asyncio.run(produce_records(recorded, kafka_kwargs(settings.kafka), settings.kafka.topic_prefix,
                                partitions=settings.kafka.partitions))
    first, *_ = run.firing
    gone = {**run.firing[first], "state": "resolved", "ended_at": run.firing[first]["ts"]}

    with console(config) as client:
        page = until(client, "/alerts", lambda b: all(f'id="alert-{fp}"' in b for fp in run.firing))
        for fp, t in run.firing.items():
            assert f'id="alert-{fp}"' in page and t["summary"].split()[0] in page, fp
        assert 'id="banner"' not in page, page
        fleet = client.get("/", headers=AUTH).text
        assert all(f'id="node-{n}"' in fleet for n in run.nodes) and 'id="services-summary"' in fleet, fleet
        classes = client.get("/classes", headers=AUTH).text
        assert re.search(r"util_gpu</td><td>\d+ \(\d+–\d+ %\)", classes), classes
        services = client.get("/services", headers=AUTH).text
        assert re.search(r'id="latency-[^"]+-ttft"><td>time to first token</td><td class="q" title="p50 ≤', services)
        assert 'id="spool-only"' in client.get("/scheduler", headers=AUTH).text
        retro = client.get("/retro", headers=AUTH, params={"since": "5m ago"})  # replayed from the input topics
        assert retro.status_code == 200 and 'id="alerts"' in retro.text and run.nodes[0] in retro.text, retro.text[:2000]

        asyncio.run(produce(kafka_bootstrap, topics.alerts, [(first.encode(), json.dumps(gone).encode())]))
        page = until(client, "/alerts", lambda b: f'id="alert-{first}"' not in b)
        assert f'id="alert-{first}"' not in page and len(run.firing) - 1 == page.count('<article class="alert')

        rule = next(t for fp, t in run.firing.items() if fp != first)["rule"]
        r = client.post("/silences", headers=AUTH, data={"matchers": f"rule={rule}", "duration": "2h",
                                                         "comment": "from the console", "by": "test"})
        assert r.status_code == 200 and f"rule={rule}" in r.text, r.text  # followed to /silences
        acked = next(fp for fp in run.firing if fp != first)
        r = client.post(f"/alerts/{acked}/ack", headers=AUTH, data={"comment": "on it"})
        assert r.status_code == 200 and "acknowledged by web" in r.text, r.text

    records = asyncio.run(consume_all(kafka_bootstrap, topics.control, 2))
    written = [json.loads(r.value) for r in records]
    silence = next(w for w in written if "matchers" in w)
    assert silence["matchers"] == [{"label": "rule", "op": "=", "value": rule}]
    assert silence["comment"] == "from the console" and silence["ends_at"] - silence["starts_at"] == 7200
    assert any(w.get("fingerprint") == acked and w.get("comment") == "on it" for w in written)

    # a console started later on another host shows the same: one Chromium check
    with web_server(_write(tmp_path, config), {TOKEN_ENV: TOKEN}) as url, chromium(tmp_path) as d:
        from selenium.webdriver.common.by import By

        d.get(url + f"/login?next=%2Falerts%3Falert%3D{acked}")  # the page that holds it
        d.find_element(By.NAME, "token").send_keys(TOKEN)
        d.find_element(By.CSS_SELECTOR, "#login button").click()
        card = d.find_element(By.ID, f"alert-{acked}")
        assert run.firing[acked]["rule"] in card.text and "acknowledged by web" in card.text
        d.implicitly_wait(0)
        assert not d.find_elements(By.ID, f"alert-{first}")
        d.implicitly_wait(5)
        full_page_shot(d, shot_dir(tmp_path) / "web-cluster-alerts.png")
        d.get(url + "/silences")
        assert f"rule={rule}" in d.find_element(By.ID, "silences").text


def _write(tmp_path, config: dict):
    path = tmp_path / "cluster.yaml"
    path.write_text(json.dumps({**config, "spool": {"path": str(tmp_path / "elsewhere.db")}}))  # not the run's
    return path


def test_empty_topics_and_an_unreachable_broker_are_said(kafka_bootstrap: str, tmp_path) -> None:
    with console({**_config(kafka_bootstrap, unique_topic("gw") + "."), "notify": {"control": "spool"},
                  "spool": {"path": str(tmp_path / "spool.db")}}) as client:
        page = until(client, "/alerts", lambda b: "no topic" in b)
        assert "no topic" in page and 'id="no-alerts"' in page, page
        r = client.post("/silences", headers=AUTH, data={"matchers": "node=gpu-x9", "duration": "1h"})
        assert r.status_code == 200 and "node=gpu-x9" in r.text, r.text  # notify.control: spool, kept there
    with console(_config("127.0.0.1:1", "gw.")) as client:
        page = until(client, "/", lambda b: "unreachable" in b)
        assert 'id="banner"' in page and "unreachable" in page and "retrying every" in page, page
        assert client.get("/classes", headers=AUTH).status_code == 200


def test_a_broker_that_dies_is_said_and_the_view_comes_back_with_it(own_broker, monkeypatch) -> None:
    """Killed mid-session, the pages keep what was read and say so; restarted, what was produced
    since shows and the banner goes (probes shortened so the test waits seconds, not a minute)."""
    from gpuwarden.app import webcluster

    for name, value in (("PROBE_S", 1.0), ("PROBE_TIMEOUT_S", 3.0), ("RETRY_S", 1.0)):
        monkeypatch.setattr(webcluster, name, value)
    config = {**_config(own_broker.bootstrap, unique_topic("gw") + "."), "notify": {"control": "spool"}}
    settings = validate_settings(config)
    topics = Topics(settings.kafka.topic_prefix)
    for t in (topics.alerts, *(changelog_topic(app_id(settings), t)
                              for t in (NODE_TABLE, CLASS_TABLE, INFERENCE_TABLE, SERVICE_TABLE))):
        asyncio.run(create_topic(own_broker.bootstrap, t))
    asyncio.run(produce(own_broker.bootstrap, topics.alerts, keyed([_alert("fp-before", "oom-risk", "gpu-b1")])))
    with console(config) as client:
        assert 'id="alert-fp-before"' in until(client, "/alerts", lambda b: "fp-before" in b)
        own_broker.run("kill")
        page = until(client, "/alerts", lambda b: "unreachable" in b)
        assert "unreachable" in page and "showing what was read up to" in page and 'id="alert-fp-before"' in page, page
        own_broker.run("restart")
        asyncio.run(produce(own_broker.bootstrap, topics.alerts, keyed([_alert("fp-after", "thermal-throttle", "gpu-b2")])))
        page = until(client, "/alerts", lambda b: "fp-after" in b and 'id="banner"' not in b)
        assert 'id="alert-fp-after"' in page and 'id="alert-fp-before"' in page and 'id="banner"' not in page, page
