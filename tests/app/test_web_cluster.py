"""``gpuwarden web`` in cluster mode (``web.source: kafka``) against a real broker.

Alerts produced to the ``alerts`` topic appear on the pages (Starlette's TestClient, and once
in Chromium through a ``gpuwarden web`` process), a resolve removes one, a silence made in the
console is read back from the ``control`` topic with a consumer of the test's own, the fleet
comes from the newest ``gpu.samples``; empty topics and an unreachable broker give a banner.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from starlette.testclient import TestClient

from gpuwarden.app.settings import validate_settings
from gpuwarden.app.web import build_app
from gpuwarden.contract import AlertState, AlertTransition, Evidence, Tier, Topics, encode
from tests.app.web_support import TOKEN_ENV, chromium, web_server
from tests.kafka_support import consume_all, create_topic, produce, unique_topic
from tests.streams_kafka.records import keyed, snapshot

pytestmark = pytest.mark.kafka


@pytest.fixture(autouse=True)
def _token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
TOKEN = "cluster-t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _config(bootstrap: str, prefix: str) -> dict:
    return {"kafka": {"bootstrap": bootstrap, "topic_prefix": prefix, "partitions": 2},
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


def until(client: TestClient, path: str, seen: Callable[[str], bool], wait_s: float = 60.0) -> str:
    """The page once ``seen`` holds for it (the view follows the topics in the background)."""
    deadline = time.monotonic() + wait_s
    while True:
        body = client.get(path, headers=AUTH).text
        if seen(body) or time.monotonic() > deadline:
            return body
        time.sleep(0.2)


def test_alerts_topic_drives_the_pages(kafka_bootstrap: str, tmp_path) -> None:
    prefix = unique_topic("gw") + "."
    topics = Topics(prefix)
    for t in (topics.alerts, topics.samples):
        asyncio.run(create_topic(kafka_bootstrap, t, partitions=2))
    hot, oom = _alert("fp-hot-1", "thermal-throttle", "gpu-a1"), _alert("fp-oom-2", "oom-risk", "gpu-a2")
    now = time.time()
    samples = [snapshot(n, seq, now - 240 + 10 * seq) for seq in range(25) for n in ("gpu-a1", "gpu-a2")]
    asyncio.run(produce(kafka_bootstrap, topics.alerts, keyed([hot, oom])))
    asyncio.run(produce(kafka_bootstrap, topics.samples, keyed(samples)))
    config = _config(kafka_bootstrap, prefix)

    with console(config) as client:
        page = until(client, "/alerts", lambda b: "fp-oom-2" in b)
        assert 'id="alert-fp-hot-1"' in page and 'id="alert-fp-oom-2"' in page, page
        assert "held 60 s" in page and "look at it" in page  # the evidence and the action
        assert 'id="banner"' not in page, page

        fleet = until(client, "/", lambda b: 'id="node-gpu-a2"' in b)
        assert 'id="node-gpu-a1"' in fleet and 'id="node-gpu-a2"' in fleet, fleet
        assert 'id="no-classes"' in client.get("/classes", headers=AUTH).text

        asyncio.run(produce(kafka_bootstrap, topics.alerts,
                            keyed([_alert("fp-hot-1", "thermal-throttle", "gpu-a1", AlertState.RESOLVED)])))
        page = until(client, "/alerts", lambda b: "fp-hot-1" not in b)
        assert "fp-hot-1" not in page and 'id="alert-fp-oom-2"' in page

        r = client.post("/silences", headers=AUTH, data={"matchers": "rule=oom-risk", "duration": "2h",
                                                         "comment": "from the console", "by": "test"})
        assert r.status_code == 200 and "rule=oom-risk" in r.text, r.text  # followed to /silences
        r = client.post("/alerts/fp-oom-2/ack", headers=AUTH, data={"comment": "on it"})
        assert r.status_code == 200 and "acknowledged by web" in r.text, r.text

    records = asyncio.run(consume_all(kafka_bootstrap, topics.control, 2))
    written = [json.loads(r.value) for r in records]
    silence = next(w for w in written if "matchers" in w)
    assert silence["matchers"] == [{"label": "rule", "op": "=", "value": "oom-risk"}]
    assert silence["comment"] == "from the console" and silence["ends_at"] - silence["starts_at"] == 7200
    assert any(w.get("fingerprint") == "fp-oom-2" and w.get("comment") == "on it" for w in written)

    # a console started later on another host shows the same: one Chromium check
    with web_server(_write(tmp_path, config), {TOKEN_ENV: TOKEN}) as url, chromium(tmp_path) as d:
        from selenium.webdriver.common.by import By

        d.get(url + "/login?next=/alerts")
        d.find_element(By.NAME, "token").send_keys(TOKEN)
        d.find_element(By.CSS_SELECTOR, "#login button").click()
        card = d.find_element(By.ID, "alert-fp-oom-2")
        assert "oom-risk" in card.text and "acknowledged by web" in card.text
        assert not d.find_elements(By.ID, "alert-fp-hot-1")
        d.get(url + "/silences")
        assert "rule=oom-risk" in d.find_element(By.ID, "silences").text


def _write(tmp_path, config: dict):
    path = tmp_path / "cluster.yaml"
    path.write_text(json.dumps({**config, "spool": {"path": str(tmp_path / "spool.db")}}))
    return path


def test_empty_topics_and_an_unreachable_broker_are_said(kafka_bootstrap: str) -> None:
    with console({**_config(kafka_bootstrap, unique_topic("gw") + "."), "notify": {"control": "spool"}}) as client:
        page = until(client, "/alerts", lambda b: "no topic" in b)
        assert "no topic" in page and 'id="no-alerts"' in page, page
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
    prefix = unique_topic("gw") + "."
    topics = Topics(prefix)
    asyncio.run(create_topic(own_broker.bootstrap, topics.alerts))
    asyncio.run(create_topic(own_broker.bootstrap, topics.samples))
    asyncio.run(produce(own_broker.bootstrap, topics.alerts, keyed([_alert("fp-before", "oom-risk", "gpu-b1")])))
    with console({**_config(own_broker.bootstrap, prefix), "notify": {"control": "spool"}}) as client:
        assert 'id="alert-fp-before"' in until(client, "/alerts", lambda b: "fp-before" in b)
        own_broker.run("kill")
        page = until(client, "/alerts", lambda b: "unreachable" in b)
        assert "unreachable" in page and "showing what was read up to" in page and 'id="alert-fp-before"' in page, page
        own_broker.run("restart")
        asyncio.run(produce(own_broker.bootstrap, topics.alerts, keyed([_alert("fp-after", "thermal-throttle", "gpu-b2")])))
        page = until(client, "/alerts", lambda b: "fp-after" in b and 'id="banner"' not in b)
        assert 'id="alert-fp-after"' in page and 'id="alert-fp-before"' in page and 'id="banner"' not in page, page
