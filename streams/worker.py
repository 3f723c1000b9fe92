"""``gpuwarden streams``: run one faust worker of the topology in :mod:`gpuwarden.streams.topology`.

Workers started with the same config join one consumer group and share the
partitions; each recovers the state of the partitions it is given from the
changelog topics, so a worker may be killed and restarted (or replaced) at any time.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuwarden.streams.config import StreamsSettings

if TYPE_CHECKING:
    import faust

log = logging.getLogger("gpuwarden.streams")


def cmd_streams(args: argparse.Namespace, settings: StreamsSettings) -> int:
    """Run a worker until SIGINT/SIGTERM."""
    import asyncio

    from gpuwarden.exposition import serve_from
    from gpuwarden.kafka import KafkaConnectError, client_kwargs, diagnose
    from gpuwarden.streams.telemetry import StreamMetrics
    from gpuwarden.streams.topology import Topology, app_id

    why = asyncio.run(diagnose(client_kwargs(settings)))  # faust retries a refused login forever
    if why:
        raise KafkaConnectError(f"Kafka {settings.kafka.bootstrap}: {why}")

    worker_id = args.worker_id or f"{socket.gethostname()}-{os.getpid()}"
    data_dir = Path(args.data_dir or Path("var") / "streams" / worker_id)
    data_dir.mkdir(parents=True, exist_ok=True)
    metrics = StreamMetrics()
    app = Topology(settings, worker_id=worker_id, data_dir=data_dir, metrics=metrics).app
    try:
        serve_from(metrics.registry, settings.engine, getattr(args, "metrics_port", None))
    except OSError as e:  # the port taken, or an address not on this host
        print(f"gpuwarden streams: cannot serve /metrics on {settings.engine.metrics_bind}: {e.strerror or e}",
              file=sys.stderr)
        return 1
    log.warning("streams worker %s: app %s, broker %s, data dir %s",
                worker_id, app_id(settings), settings.kafka.bootstrap, data_dir)
    level = logging.getLevelName(logging.getLogger().getEffectiveLevel())
    worker = quiet_worker(app, loglevel=level, redirect_stdouts=False)
    try:
        worker.execute_from_commandline()
    except SystemExit as e:
        return int(e.code or 0)
    return 0


def quiet_worker(app: faust.App, **kwargs: Any) -> faust.Worker:
    """A faust Worker for ``app`` without the terminal spinner, collector tuned once started.

    faust's spinner puts a DEBUG-level handler on the root logger, so every debug line of
    aiokafka's fetcher (several per fetch) was formatted and handled: ~8 % of a stream
    worker's CPU in ``bench/streams_throughput.py``. Without it the root logger keeps
    the level given (``-v``)."""
    import faust

    from gpuwarden.streams.runtime import tune_gc

    class Worker(faust.Worker):
        async def on_startup_finished(self) -> None:
            await super().on_startup_finished()
            tune_gc()

    worker = Worker(app, quiet=True, **kwargs)
    worker.spinner = None
    return worker
