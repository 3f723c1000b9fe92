"""The retro report renders in headless Chromium with every section; the screenshot is kept."""

from __future__ import annotations

import json
import re

from gpuwarden.history.retro import SECTIONS
from tests.history.browser import rendered, screenshot
from tests.history.builders import REPO, config, gw

ARTIFACTS = REPO / "artifacts"


def test_report_renders_every_section(recorded, tmp_path):
    # A short observation period so the 1-hour run has class baselines to draw as bands.
    cfg = config(tmp_path, extra="engine:\n  observation_period: 20m\n  baseline_min_samples: 10\n"
                                  "  baseline_refresh: 5m\n")
    report = tmp_path / "retro.html"
    r = gw("replay", "--config", cfg, "--from-file", str(recorded["file"]), "--json",
           "--report", str(report))
    assert r.returncode == 0, r.stderr
    transitions = [json.loads(x) for x in r.stdout.splitlines()]
    text = report.read_text(encoding="utf-8")

    # Self-contained: no URL other than embedded data, no scripts.
    assert not re.search(r"https?://|<script|<link", text)
    assert all(src.startswith("data:image/png;base64,") for src in re.findall(r'src="([^"]+)"', text))
    # The alerts section names every rule that fired, with its evidence.
    for t in transitions:
        assert t["rule"] in text
    assert "held for" in text and "recommended action" in text
    assert re.search(r"<li>llama-pretrain: baseline \d+–\d+%", text), "a class baseline band is drawn"

    sections, images = rendered(report)
    assert list(sections) == list(SECTIONS)
    assert all(height > 50 for height in sections.values()), sections
    assert [s for s, _ in images] == ["memory", "utilization", "thermal", "timeline"]
    assert all(width > 300 for _, width in images), images

    shot = screenshot(report, ARTIFACTS / "retro-report.png")
    (ARTIFACTS / "retro-report.html").write_text(text, encoding="utf-8")
    assert shot.stat().st_size > 50_000  # a page of plots, not a blank window


def _leak_incident():
    """Memory rising 44 GiB/h for 30 min, an alert firing at 20 min on its 15-min window, then
    released (falling) for the last 15 min of data: the drawn trend must be the alert's."""
    from gpuwarden.contract import AlertState, AlertTransition, Evidence, TaskMetric, TaskMetricKind, Tier
    from gpuwarden.history.retro import Incident, collect
    from tests.history.builders import gpu, snap

    t0, gib = 1_700_000_000.0, float(1 << 30)
    recs = []
    for k in range(0, 46 * 60, 60):
        used = 5 + 44 * min(k, 1800) / 3600 - (1.53 * (k - 1800) / 3600 if k > 1800 else 0)
        recs.append(snap("n1", t0 + k, k // 60, [gpu(0, 90, mem_gib=used)], []))
    recs += [TaskMetric(node="n1", ts=t0 + 600 * i + m, task="llm", task_id="r1",
                        kind=TaskMetricKind.CHECKPOINT_BEGIN if m == 0 else TaskMetricKind.CHECKPOINT_END)
             for i in range(1, 4) for m in (0, 30)]
    fired = AlertTransition(fingerprint="fp", rule="memory-leak", tier=Tier.ATTENTION, state=AlertState.FIRING,
                            labels={"node": "n1", "gpu": "0"}, started_at=t0 + 1200, ts=t0 + 1200,
                            summary="leak", evidence=Evidence(slope=44.0, slope_unit="GiB/h", window_s=900))
    inc: Incident = collect(recs, [fired])
    return inc, t0, gib


def test_the_memory_trend_is_the_alerts_own_slope_over_its_window():
    """Issue #18, defect 9: the dashed line was fitted over the last 15 min of data (-1.53 GiB/h
    after the memory was released) and contradicted the alert (+44.3 GiB/h)."""
    from gpuwarden.history.retro import memory_trends

    inc, t0, _ = _leak_incident()
    (tr,) = memory_trends(inc, [("n1", 0)])
    assert (tr.rule, tr.start, tr.end) == ("memory-leak", t0 + 300, t0 + 1200)
    assert tr.gib_per_s * 3600 == 44.0
    assert abs(tr.at(t0 + 750) - (5 + 44 * 750 / 3600)) < 0.5  # through the data of its window


def test_checkpoints_are_spans_and_timeline_rows_name_their_rules():
    from gpuwarden.history.retro import checkpoints, timeline_label

    inc, t0, _ = _leak_incident()
    spans = checkpoints(inc, {"n1"})
    assert [(c.begin - t0, c.end - t0) for c in spans] == [(600, 630), (1200, 1230), (1800, 1830)]
    assert timeline_label("n1 gpu0", ["memory-leak"]) == "n1 gpu0: memory-leak"
    assert timeline_label("n1 gpu0", ["a", "b", "c", "d", "e"]) == "n1 gpu0: a, b, c +2"
    assert timeline_label("n1 (node)", []) == "n1 (node)"
