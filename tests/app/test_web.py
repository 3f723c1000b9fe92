"""``gpuwarden web`` in a real headless Chromium, over the spool of a simulated ``gpuwarden run``.

One browser session walks every page (a screenshot of each; GPUWARDEN_DOC_SHOTS=1 writes them
to docs/img), signs in, creates a silence and expires it; the silence is checked with the
``gpuwarden silence list`` CLI, not with the console's own reading. Writes without the
credentials are refused over plain HTTP.
"""

from __future__ import annotations

import re

import httpx
import pytest

from gpuwarden.contract import SchedulerJob, Topics, decode
from gpuwarden.notifiers import refusals
from gpuwarden.notifiers.refusals import Refusal
from gpuwarden.spool import Spool
from tests.app.web_support import REPO, TOKEN_ENV, chromium, full_page_shot, gpuwarden, shot_dir, simulated_run, web_server

TOKEN = "t0ken-not-shown-anywhere"
WEB = f"web: {{token: {{env: {TOKEN_ENV}}}}}\n"
ENGINE = "engine: {observation_period: 30m, baseline_refresh: 10m}\n"  # bands within the hour, as make demo


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("web")
    run = simulated_run(tmp, WEB + ENGINE)
    assert run.firing, "the simulated run left no alert open"
    with web_server(run.config, {TOKEN_ENV: TOKEN}) as url:
        yield tmp, run, url


def _silences(run) -> str:
    r = gpuwarden("silence", "list", "--config", str(run.config))
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_writes_refused_without_credentials(console) -> None:
    _, run, url = console
    with httpx.Client(base_url=url, follow_redirects=False) as http:
        assert http.get("/").status_code == 303  # to the sign-in page
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            r = http.post("/silences", data={"matchers": "rule=oom-risk", "duration": "1h"}, headers=headers)
            assert r.status_code == 401, r.text
        fp = next(iter(run.firing))
        assert http.post(f"/alerts/{fp}/ack").status_code == 401
        ok = http.get("/alerts", headers={"Authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200 and TOKEN not in ok.text
    assert "oom-risk" not in _silences(run)


def _submit(d, button) -> None:
    """Click a form's button and wait for the page it leads to (the old one gone)."""
    from selenium.webdriver.support.ui import WebDriverWait

    button.click()
    WebDriverWait(d, 15).until(lambda _: _gone(button))


def _gone(element) -> bool:
    """True once the element has left the document.

    Selenium's ``staleness_of`` knows only StaleElementReferenceException; Chromium, asked about a
    node in the instant its document is replaced, answers "Node with given id does not belong to the
    document" as an unknown error, which is the same fact.
    """
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as e:
        if "does not belong to the document" in str(e):
            return True
        raise
    return False


def test_console_in_chromium(console) -> None:
    from selenium.webdriver.common.by import By

    tmp, run, url = console
    shots = shot_dir(tmp)
    with chromium(tmp) as d:
        d.get(url + "/alerts")
        assert "/login" in d.current_url
        full_page_shot(d, shots / "web-login.png")
        d.find_element(By.NAME, "token").send_keys("not-the-token")
        _submit(d, d.find_element(By.CSS_SELECTOR, "#login button"))
        assert d.find_element(By.ID, "error").is_displayed()
        d.find_element(By.NAME, "token").send_keys(TOKEN)
        _submit(d, d.find_element(By.CSS_SELECTOR, "#login button"))
        assert d.current_url.endswith("/alerts")

        # open alerts, each on its page of the list with its evidence; charts drawn by uPlot
        for fp, t in run.firing.items():
            d.get(f"{url}/alerts?alert={fp}")
            card = d.find_element(By.ID, f"alert-{fp}")
            assert t["rule"] in card.text
            assert card.find_elements(By.CSS_SELECTOR, ".evidence li"), f"{fp}: no evidence"
        d.get(url + "/alerts")
        drawn = d.find_elements(By.CSS_SELECTOR, "figure.chart[data-drawn] canvas")
        assert drawn, "no alert chart was drawn"
        assert TOKEN not in d.page_source
        full_page_shot(d, shots / "web-alerts.png")

        d.get(url + "/")
        for node in run.nodes:
            assert d.find_element(By.ID, f"node-{node}").is_displayed()
        full_page_shot(d, shots / "web-fleet.png")

        # inference SLOs: quantiles as bucket bounds (interpolation marked), budgets, burn rates, open SLO alerts
        # An error-rate burn's alert: its service's error_rate row shows the burning pair (the run's
        # first SLO alert may be another service's, by when each first fired: chat-tail's has no burn).
        slo_alerts = {fp: t for fp, t in run.firing.items()
                      if t["rule"].startswith("slo-") and t["labels"].get("objective") == "error_rate"}
        assert slo_alerts, "the simulated run left no error-rate SLO alert open"
        fp, t = min(slo_alerts.items())
        d.get(f"{url}/alerts?alert={fp}")
        d.find_element(By.CSS_SELECTOR, f"#alert-{fp} .slo-link a").click()
        service = d.find_element(By.ID, f"service-{t['labels']['service']}")
        ttft = service.find_element(By.CSS_SELECTOR, "tr[id$=-ttft]").text
        assert re.search(r"≤ [\d.]+ s\s*≈[\d.]+ s interpolated", ttft), ttft
        errors = service.find_element(By.CSS_SELECTOR, "tr[id$=-error_rate]").text
        assert "at most 1 % of requests failed" in errors and "×" in errors, errors
        assert service.find_elements(By.CSS_SELECTOR, "tr[id$=-error_rate] td.burning"), "no pair shown burning"
        linked = {a.get_attribute("href").rpartition("#alert-")[2]
                  for a in service.find_elements(By.CSS_SELECTOR, ".open-alerts a")}
        assert set(slo_alerts) & linked, (linked, slo_alerts)
        full_page_shot(d, shots / "web-services.png")
        d.get(url + "/")
        assert t["labels"]["service"] in d.find_element(By.ID, "services-summary").text

        d.get(url + "/classes")
        bands = [r.text for r in d.find_elements(By.CSS_SELECTOR, "section.class tr.band")]
        assert any(re.search(r"util_gpu \d+ \(\d+–\d+ %\)", b) for b in bands), bands
        full_page_shot(d, shots / "web-classes.png")

        # scheduler queues from a real job log the CLI imported into the same spool
        philly = REPO / "tests" / "fixtures" / "philly" / "philly-jobs-2017-09-10.jsonl"
        r = gpuwarden("import-jobs", "--config", str(run.config), "--format", "philly", str(philly))
        assert r.returncode == 0, r.stderr
        d.get(url + "/scheduler?since=2017-01-01")
        queues = d.find_elements(By.CSS_SELECTOR, "#queues tbody tr")
        assert len(queues) >= 2, [q.text for q in queues]  # a partition and the total
        total = queues[-1].text.split()
        # the imported jobs plus the simulated run's own (mixed simulates a Slurm cluster, "sim")
        with Spool(tmp / "spool.db") as spool:
            simulated = len({(j.cluster, j.job_id) for j in (decode(r.value) for r in spool.read(Topics().jobs))
                             if isinstance(j, SchedulerJob) and j.cluster == "sim"})
        assert simulated > 0
        assert total[:2] == ["total", str(len(philly.read_text().splitlines()) + simulated)] and "min" in total, total
        full_page_shot(d, shots / "web-scheduler.png")

        # a silence made in the browser is one the CLI sees; expired in the browser, it is gone
        rule = next(iter(run.firing.values()))["rule"]
        d.get(url + "/silences")
        d.find_element(By.NAME, "matchers").send_keys(f"rule={rule}")
        d.find_element(By.NAME, "comment").send_keys("browser test")
        _submit(d, d.find_element(By.CSS_SELECTOR, "#new-silence button"))
        rows = d.find_elements(By.CSS_SELECTOR, "#silences tr[id^=silence-]")
        assert len(rows) == 1 and f"rule={rule}" in rows[0].text
        sid = rows[0].get_attribute("id").removeprefix("silence-")
        assert sid in _silences(run)
        full_page_shot(d, shots / "web-silences.png")
        _submit(d, rows[0].find_element(By.TAG_NAME, "button"))
        d.implicitly_wait(0)
        assert not d.find_elements(By.CSS_SELECTOR, "#silences tr[id^=silence-]")
        d.implicitly_wait(5)
        assert sid not in _silences(run)

        d.get(url + "/retro")
        links = d.find_elements(By.CSS_SELECTOR, "#retro-links a")
        full_page_shot(d, shots / "web-retro.png")
        _submit(d, links[-1])  # around the last open alert
        assert d.find_element(By.ID, "alerts").is_displayed()  # the retro report's sections
        assert TOKEN not in d.page_source


def test_a_console_without_credentials_reads_on_loopback_and_never_writes(console, tmp_path) -> None:
    _, run, _ = console
    bare = tmp_path / "bare.yaml"
    bare.write_text(run.config.read_text().replace(WEB, ""))
    with web_server(bare, {}) as url, httpx.Client(base_url=url, follow_redirects=False) as http:
        assert http.get("/alerts").status_code == 200
        r = http.post("/silences", data={"matchers": "rule=oom-risk"})
        assert r.status_code == 403 and "web.token" in r.text
        empty = http.get("/retro", params={"since": "2000-01-01T00:00:00Z", "until": "2000-01-02T00:00:00Z"})
        assert empty.status_code == 200 and "no records in the spool from 2000-01-01" in empty.text


def test_off_loopback_needs_credentials(tmp_path) -> None:
    bare = tmp_path / "bare.yaml"
    bare.write_text(f"spool: {{path: {tmp_path / 's.db'}}}\n")
    r = gpuwarden("web", "--config", str(bare), "--bind", "0.0.0.0", "--port", "0")
    assert r.returncode == 2 and "could read the fleet" in r.stderr, r.stderr


def test_a_receiver_refusing_our_messages_is_said_on_the_console(console) -> None:
    """What delivery records about a receiver that refuses our credentials (notifiers/refusals.py)
    is read from the spool and said above every page, until it is forgotten (it accepts again)."""
    tmp, _, url = console
    refusal = Refusal("team-a", "feishu", 1_767_225_600.0, "sign match fail (19021)")
    with Spool(tmp / "spool.db") as spool:
        refusals.save(spool, refusal)
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
            page = http.get("/alerts").text
        assert "Feishu room team-a refuses our messages: sign match fail (19021) since 00:00" in page
    finally:
        with Spool(tmp / "spool.db") as spool:
            refusals.forget(spool, "team-a")
