"""Chat and webhook endpoints down for 30 minutes of a 3-hour incident, then back.

The same transitions (the engine over the ``mixed`` fleet) go through the real
Notifier and Delivery to loopback fakes twice: once with the fakes up throughout,
once with both answering 503 for the first 30 simulated minutes after the first
alert. Nothing is lost (every alert transition the reference run notified is
notified) and nothing is duplicated (no transition is notified more often).
"""

from __future__ import annotations

from gpuwarden.producers.simulator import Simulator
from gpuwarden.streams.engine import Engine
from tests.reliability.notify_support import notify

START = 1_767_225_600.0
OUTAGE_S = 1800.0


def transitions() -> list:
    sim = Simulator("mixed", nodes=2, gpus=4, seed=5, start_ts=START, tick_s=10.0, onset_s=600)
    engine = Engine()
    return engine.process_many(sim.run(3 * 3600)) + engine.flush()


async def test_outage_loses_and_duplicates_nothing(tmp_path, monkeypatch, reliability_report):
    trs = transitions()
    ref_alerts, ref_cards, _, _ = await notify(trs, tmp_path, monkeypatch)
    got_alerts, got_cards, refused, pending = await notify(trs, tmp_path, monkeypatch, down_s=OUTAGE_S)
    assert refused > 0 and pending == 0, "the fakes refused while down, and the outboxes drained after"
    assert ref_alerts and ref_cards
    lost = set(ref_alerts) - set(got_alerts)
    duplicated = {k: n for k, n in got_alerts.items() if n > ref_alerts.get(k, 0)}
    assert not lost and not duplicated, (sorted(lost)[:3], sorted(duplicated.items())[:3])
    assert set(got_alerts) == set(ref_alerts)
    chat_lost = sum((ref_cards - got_cards).values())
    reliability_report("notifier endpoints down 30 min (webhook + Feishu)", lost=len(lost),
                       duplicates=sum(n - ref_alerts.get(k, 0) for k, n in duplicated.items()),
                       detail=f"{len(trs)} transitions; {sum(got_alerts.values())} alert notifications on the "
                              f"webhook (reference {sum(ref_alerts.values())}), {refused} requests refused while "
                              f"down; chat messages {sum(got_cards.values())} vs {sum(ref_cards.values())} "
                              f"({chat_lost} reference cards not verbatim: queued ones go out as a digest)")
