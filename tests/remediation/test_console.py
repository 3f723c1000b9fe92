"""The console's confirmation path: a real ``gpuwarden web`` in headless Chromium over a spool
holding a firing hardware alert on Slurm node gn1 (the real Slurm of scripts/slurm-local). The
alert's card links to its remediation page; signed in, *Drain node* drains gn1 (scontrol shows
DRAIN with gpuwarden's reason), *Resume node* puts it back; without credentials a POST is refused
and nothing changes."""

from __future__ import annotations

import httpx
import pytest
import yaml

from gpuwarden.contract import RemediationOutcome, Topics
from gpuwarden.remediation.act import audit_trail
from gpuwarden.spool import Spool
from tests.app.test_web import _submit
from tests.app.web_support import TOKEN_ENV, chromium, web_server
from tests.remediation.support import alert, node_state, settled, spool_alerts
from tests.slurm_support import LocalSlurm

pytestmark = pytest.mark.slurm
TOKEN = "console-t0ken-not-shown"


def test_drain_and_resume_from_the_console(clean: LocalSlurm, tmp_path) -> None:
    from selenium.webdriver.common.by import By

    a = alert("gn1")
    spool_alerts(tmp_path / "spool.db", a)
    cfg = tmp_path / "gpuwarden.yaml"
    cfg.write_text(yaml.safe_dump({"spool": {"path": str(tmp_path / "spool.db")}, "web": {"token": {"env": TOKEN_ENV}},
                                   "remediation": {"backend": "slurm", "slurm": {"conf": clean.conf}}}))
    with web_server(cfg, {TOKEN_ENV: TOKEN}) as url:
        with httpx.Client(base_url=url) as http:  # no credentials: refused, nothing drained
            assert http.post(f"/alerts/{a.fingerprint}/remediation", data={"action": "drain"}).status_code == 401
        assert node_state(clean, "gn1") == ("IDLE", "")
        with chromium(tmp_path) as d:
            d.get(f"{url}/login?next=/alerts")
            d.find_element(By.NAME, "token").send_keys(TOKEN)
            _submit(d, d.find_element(By.CSS_SELECTOR, "#login button"))
            d.find_element(By.CSS_SELECTOR, f"#alert-{a.fingerprint} .remediation a").click()
            assert "drain gn1" in d.find_element(By.ID, "offer").text
            d.find_element(By.NAME, "by").send_keys("carol")
            _submit(d, d.find_element(By.CSS_SELECTOR, "#act button[value=drain]"))
            assert "drain gn1 (slurm): done by carol" in d.find_element(By.ID, "said").text
            state, reason = node_state(clean, "gn1")
            assert "DRAIN" in state and reason == f"gpuwarden: xid-hardware {a.fingerprint}"
            assert "carol" in d.find_element(By.ID, "trail").text
            _submit(d, d.find_element(By.CSS_SELECTOR, "#act button[value=resume]"))
            assert "resume gn1 (slurm): done by web" in d.find_element(By.ID, "said").text
    assert settled(clean, "gn1") == ("IDLE", "")
    with Spool(tmp_path / "spool.db") as spool:
        assert [(r.action, r.outcome, r.by) for r in audit_trail(spool, Topics())] == [
            ("drain", RemediationOutcome.DONE, "carol"), ("resume", RemediationOutcome.DONE, "web")]
