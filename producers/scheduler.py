"""The scheduler collector: one per cluster, polling its scheduler and publishing the queue.

Each poll publishes every job (:class:`gpuwarden.contract.SchedulerJob`) and every node's GPUs
(:class:`gpuwarden.contract.NodeCapacity`), all stamped with the poll's time, then a
:class:`gpuwarden.contract.SchedulerPoll` that closes it: a reader sees the whole queue at each
moment, and a job missing from a poll has left the scheduler's view. A scheduler that does not
answer (a command error, a timeout, an API server away) is logged once when it starts and once
when it recovers, counted, published as a poll with ``error`` (so "the queue is empty" and "the
scheduler is away" stay apart), and polled again after an exponential backoff capped at
``max_backoff_s``; nothing it does stops the collector.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from gpuwarden.contract import NodeCapacity, SchedulerJob, SchedulerPoll
from gpuwarden.producers.agent import EXIT_FAIL, EXIT_OK, Sink, pump_forever
from gpuwarden.producers.config import SchedulerConfig, SchedulerSettings

log = logging.getLogger(__name__)


class SchedulerSource(Protocol):
    """What a scheduler adapter gives: the jobs and nodes at ``ts``; raises on failure."""

    async def poll(self, cluster: str, ts: float) -> tuple[list[SchedulerJob], list[NodeCapacity]]: ...


@dataclass
class PollCounts:
    polls: int = 0
    errors: int = 0
    failing_since: float | None = None  # wall time of the first failure in a row
    last_error: str = ""


@dataclass
class Collector:
    """Polls ``source`` every ``interval_s`` (wall clock: it talks to the outside world) and hands
    each poll's records to ``put``."""

    source: SchedulerSource
    cluster: str
    scheduler: Literal["slurm", "kubernetes"]
    put: Callable[[list[Any]], None]
    interval_s: float = 30.0
    max_backoff_s: float = 300.0
    clock: Callable[[], float] = time.time
    counts: PollCounts = field(default_factory=PollCounts)
    #: Called with each poll's records and its wall time (the collector's /metrics).
    polled: Callable[[list[Any], float], None] | None = None

    async def poll_once(self) -> bool:
        """One poll; True if the scheduler answered."""
        ts = self.clock()
        self.counts.polls += 1
        began = time.monotonic()
        try:
            jobs, nodes = await self.source.poll(self.cluster, ts)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - whatever the scheduler does, the collector goes on
            why = f"{type(e).__name__}: {e}" if not str(e).startswith(type(e).__name__) else str(e)
            c = self.counts
            c.errors += 1
            if c.failing_since is None:
                c.failing_since = ts
                log.warning("scheduler %s (%s) not answering: %s; retrying with backoff",
                            self.cluster, self.scheduler, why)
            c.last_error = why
            self._publish([SchedulerPoll(ts=ts, cluster=self.cluster, scheduler=self.scheduler, error=why[:4096])],
                          began)
            return False
        if self.counts.failing_since is not None:
            log.warning("scheduler %s answering again after %.0f s (%d failed polls)", self.cluster,
                        ts - self.counts.failing_since, self.counts.errors)
            self.counts.failing_since = None
        self._publish([*jobs, *nodes, SchedulerPoll(ts=ts, cluster=self.cluster, scheduler=self.scheduler,
                                                    jobs=len(jobs), nodes=len(nodes))], began)
        return True

    def _publish(self, records: list[Any], began: float) -> None:
        if self.polled is not None:
            self.polled(records, time.monotonic() - began)
        self.put(records)

    def delay(self, failures_in_a_row: int) -> float:
        """The wait before the next poll: the interval, doubled per failure in a row, capped."""
        if not failures_in_a_row:
            return self.interval_s
        return min(self.interval_s * 2.0 ** failures_in_a_row, max(self.max_backoff_s, self.interval_s))

    async def run(self, stop: asyncio.Event, polls: int | None = None) -> None:
        """Poll until ``stop`` is set (or ``polls`` polls were made)."""
        failures, made = 0, 0
        while not stop.is_set() and (polls is None or made < polls):
            failures = 0 if await self.poll_once() else failures + 1
            made += 1
            if polls is not None and made >= polls:
                return
            try:
                await asyncio.wait_for(stop.wait(), self.delay(failures))
            except asyncio.TimeoutError:
                pass


def source_for(args: argparse.Namespace, cfg: SchedulerConfig) -> tuple[SchedulerSource, Literal["slurm", "kubernetes"]]:
    if args.slurm:
        from gpuwarden.producers.slurm import SlurmCli

        return SlurmCli(timeout_s=cfg.command_timeout), "slurm"
    from gpuwarden.producers.kube import KubeApi

    return KubeApi(str(cfg.kubeconfig) if cfg.kubeconfig else None, timeout_s=cfg.command_timeout), "kubernetes"


async def _collect(args: argparse.Namespace, settings: SchedulerSettings) -> int:
    cfg = settings.scheduler
    try:
        source, kind = source_for(args, cfg)
    except ImportError as e:
        print(f"gpuwarden scheduler: {e}; install the extra: pip install 'gpuwarden[kubernetes]'", file=sys.stderr)
        return EXIT_FAIL
    except Exception as e:  # noqa: BLE001 - a kubeconfig that cannot be read: say so at start
        print(f"gpuwarden scheduler: cannot configure the {'Kubernetes' if args.kubernetes else 'Slurm'} "
              f"client: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_FAIL
    metrics = None
    sinks: list[Sink] = []  # the sink, once made (after the port: a taken one fails before any output)

    def ready() -> str | None:  # ready while it publishes, as the agent (records waiting, none sent for 30 s)
        return sinks[0].publisher.stalled() if sinks and sinks[0].publisher is not None else None

    if args.metrics_port or cfg.metrics_port:
        from gpuwarden.exposition import serve_from
        from gpuwarden.producers.schedmetrics import SchedulerMetrics

        metrics = SchedulerMetrics()
        try:
            serve_from(metrics.registry, cfg, args.metrics_port, ready=ready)
        except OSError as e:
            print(f"gpuwarden scheduler: cannot serve /metrics on {cfg.metrics_bind}:"
                  f"{args.metrics_port or cfg.metrics_port}: {e.strerror or e}", file=sys.stderr)
            return EXIT_FAIL
    else:
        from gpuwarden import watchdog

        watchdog.alive_only()
    sink = Sink(args.output, settings)
    sinks.append(sink)
    collector = Collector(source, args.cluster or cfg.cluster, kind, sink.put, interval_s=cfg.interval,
                          max_backoff_s=cfg.max_backoff, polled=metrics.polled if metrics else None)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    pump = asyncio.create_task(pump_forever(sink, stop))
    await collector.run(stop, args.polls)
    stop.set()
    await pump
    await sink.close(drain_s=settings.agent.publish_timeout)
    return EXIT_OK


def cmd_scheduler(args: argparse.Namespace, settings: SchedulerSettings) -> int:
    return asyncio.run(_collect(args, settings))
