"""One host, one config, one spool (deploy/systemd): the agent's publisher sends its own records and
leaves the notifier's outbox alone. Before, it sent every unpublished record, the outbox's too, and
marked them published: notifications queued for a receiver that was down were lost for good."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from gpuwarden.contract import Topics
from gpuwarden.notifiers.outbox import encode_notification, outbox_topic
from gpuwarden.producers.publisher import Publisher
from gpuwarden.producers.simulator import Simulator
from gpuwarden.spool import Spool
from tests.fakes.alerts import note
from tests.kafka_support import create_topic


@pytest.mark.kafka
async def test_the_notifiers_outbox_in_a_shared_spool_is_not_published(kafka_bootstrap: str, tmp_path: Path) -> None:
    topics = Topics(prefix=f"shared-{uuid.uuid4().hex[:8]}.")
    for t in (topics.samples, topics.events, topics.metrics):
        await create_topic(kafka_bootstrap, t)
    with Spool(tmp_path / "spool.db") as spool:
        queued = note("team", 1)
        spool.append(outbox_topic("team"), encode_notification(queued), key="n1", ts=time.time())  # notify's
        pub = Publisher(spool, kafka_bootstrap, topics, send_timeout_s=10.0)
        pub.submit(Simulator("healthy", nodes=1, gpus=2, start_ts=time.time(), tick_s=1.0).step())
        try:
            sent = await pub.pump()
        finally:
            await pub.close()
        assert sent >= 1 and spool.pending_count(topics.all()) == 0
        assert [r.key for r in spool.pending(outbox_topic("team"))] == ["n1"]  # still the notifier's to send
