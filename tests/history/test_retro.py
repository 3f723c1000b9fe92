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
