"""``gpuwarden agent``: sample GPUs (NVML or simulated), watch events, publish.

Two ways to run: live (one tick per ``agent.fast_interval`` of wall time,
optionally for ``--duration``), or a simulated span (``--simulate … --duration
SPAN``), where the simulated clock runs as fast as possible from ``--start``
(default: SPAN before now). Records go to a JSONL file (``--output``, one
contract record per line) or, spool first, to Kafka.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import socket
import sys
import time
from typing import Any

from gpuwarden.contract import EventKind, GpuEvent, Topics, batch_task_metrics
from gpuwarden.kafka import client_kwargs
from gpuwarden.producers.config import AgentSettings
from gpuwarden.spool import Spool
from gpuwarden.units import parse_time
from gpuwarden.producers.publisher import within_limit
from gpuwarden.producers.source import Source, paced

log = logging.getLogger(__name__)
EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def parse_start(text: str | None, duration: float | None, now: float) -> float:
    """``--start`` (:func:`gpuwarden.units.parse_time`); default ``now - duration`` (or now)."""
    if text is None:
        return now - (duration or 0.0)
    try:
        return parse_time(text, now)  # type: ignore[return-value]
    except ValueError as e:
        raise ValueError(f"--start: {e}") from None


class Sink:
    """Where records go: a JSONL file, or the spool-first Kafka publisher."""

    def __init__(self, output: str | None, settings: AgentSettings) -> None:
        self.file = open(output, "w") if output else None  # noqa: SIM115 - closed in close()
        self.publisher = None
        self.spool = None
        if self.file is None:
            from gpuwarden.producers.publisher import Publisher

            sp, kafka = settings.spool, settings.kafka
            self.spool = Spool(sp.path, max_bytes=sp.max_bytes, max_age_s=sp.max_age)
            kw = client_kwargs(settings)
            self.publisher = Publisher(self.spool, kw.pop("bootstrap_servers"), Topics(kafka.topic_prefix),
                                       send_timeout_s=settings.agent.publish_timeout,
                                       max_record_bytes=int(settings.limits.max_record_bytes),
                                       partitions=kafka.partitions, replication_factor=kafka.replication_factor, **kw)
        self.max_record_bytes = int(settings.limits.max_record_bytes)

    def put(self, records: list[Any]) -> None:
        if self.file is not None:
            self.file.writelines(data.decode() + "\n"
                                 for _, data in within_limit(batch_task_metrics(records), self.max_record_bytes))
        else:
            self.publisher.submit(records)

    async def flush(self) -> int:
        return await self.publisher.pump() if self.publisher is not None else 0

    async def close(self, drain_s: float = 0.0) -> None:
        if self.file is not None:
            self.file.close()
        if self.publisher is not None:
            end = time.monotonic() + drain_s
            while self.spool.pending_count(self.publisher.topics.all()) and time.monotonic() < end:
                if not await self.publisher.pump():
                    await asyncio.sleep(1.0)
            await self.publisher.close()
            self.spool.close()


def _node_name(settings: AgentSettings) -> str:
    return settings.agent.node or socket.gethostname()


def build_source(args: argparse.Namespace, settings: AgentSettings, start_ts: float) -> tuple[Source, list[Any]]:
    """The simulator or the NVML collector (with its event watchers and the SDK socket)."""
    cfg = settings.agent
    if args.simulate or cfg.source == "simulate":
        from gpuwarden.producers.simulator import Simulator, tick_for

        scenarios = args.simulate or ["mixed"]
        sim = Simulator(scenarios, nodes=args.nodes or 1, gpus=args.gpus or 8, seed=args.seed,
                        start_ts=start_ts, tick_s=tick_for(args.duration, cfg.fast_interval))
        return sim, simulated_extras(cfg, sim, live=args.duration is None)
    from gpuwarden.producers.attrib import Attributor
    from gpuwarden.producers.events import KmsgWatcher, NvmlEventWatcher
    from gpuwarden.producers.nvml import NvmlCollector, load_nvml
    from gpuwarden.producers.taskrecv import TaskReceiver

    nv = load_nvml()
    attributor = Attributor(cfg.proc_root)
    collector = NvmlCollector(nv, node=_node_name(settings), tick_s=cfg.fast_interval,
                              slow_s=cfg.slow_interval, attributor=attributor)
    collector.events.window_s = cfg.event_dedup_window
    extras: list[Any] = [collector]
    kmsg = KmsgWatcher(collector.events.add, str(cfg.kmsg_path))
    if kmsg.start():
        log.info("kmsg: reading %s", cfg.kmsg_path)
        extras.append(kmsg)
    if cfg.nvml_events:
        ev = NvmlEventWatcher(nv, [g.handle for g in collector.gpus], [g.uuid for g in collector.gpus],
                              collector.events.add)
        if ev.start():
            extras.append(ev)
    extras += _scrapers(cfg, collector.node, collector.boot_id, proc_root=cfg.proc_root,
                        gpu_processes=lambda: collector.processes)
    try:
        receiver = TaskReceiver(str(cfg.socket_path), collector.node, attributor)
        receiver.start()
        extras.append(receiver)
    except OSError as e:
        log.warning("task SDK socket %s unavailable (%s); task metrics off", cfg.socket_path, e.strerror)
    return collector, extras


def simulated_extras(cfg: Any, sim: Any, *, live: bool) -> list[Any]:
    """What a simulation takes from the real host, as ``gpuwarden agent`` and ``gpuwarden run``
    both do: the serving engines of ``agent.inference.targets`` (a laptop's vLLM on CPU, a
    dashboard being tried), scraped under the first simulated node's name with a boot id of their
    own, so their (boot id, seq) never meet the simulated services' records; and, when ``live``
    (paced in wall time, not a span run as fast as possible), the task SDK socket, so a training
    script's callbacks can be tried without a GPU. Each says so in the log."""
    if not live:
        if cfg.inference.targets:
            log.warning("a simulated span runs faster than wall time: agent.inference.targets are not scraped "
                        "(leave out --duration to scrape them)")
        return []
    first = sim.nodes[0]
    extras = _scrapers(cfg, first.name, f"{first.boot_id}-scraped")
    if extras:
        log.warning("simulation: scraping %s as node %s", ", ".join(t.url for t in cfg.inference.targets), first.name)
    from gpuwarden.producers.taskrecv import TaskReceiver

    if _socket_in_use(str(cfg.socket_path)):  # a real agent's: never taken over by a simulation
        log.warning("task SDK socket %s is in use (a running agent?): the simulation's task metrics are off",
                    cfg.socket_path)
        return extras
    try:
        receiver = TaskReceiver(str(cfg.socket_path), first.name)
        receiver.start()
    except OSError as e:
        log.warning("task SDK socket %s unavailable (%s); task metrics off", cfg.socket_path, e.strerror)
    else:
        log.warning("simulation: task SDK socket %s, its metrics as node %s", cfg.socket_path, first.name)
        extras.append(receiver)
    return extras


def _socket_in_use(path: str) -> bool:
    """Whether a process receives on the Unix datagram socket at ``path`` (a stale file: no)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        try:
            s.connect(path)
        except OSError:
            return False
    return True


def _scrapers(cfg: Any, node: str, boot_id: str, **attribution: Any) -> list[Any]:
    """The inference scraper, started, when ``agent.inference`` names targets."""
    if not cfg.inference.targets:
        return []
    from gpuwarden.producers.inference import InferenceScraper

    scraper = InferenceScraper(cfg.inference, node=node, boot_id=boot_id, **attribution)
    scraper.start()
    return [scraper]


def step_with_extras(source: Source, extras: list[Any]) -> list[Any]:
    """One tick of the source plus what the task SDK receiver and the inference scraper
    collected since the last."""
    records = source.step()
    for x in extras:
        drain = getattr(x, "drain", None)
        if drain is not None:
            records.extend(drain())
    return records


async def _agent(args: argparse.Namespace, settings: AgentSettings) -> int:
    now = time.time()
    live = args.duration is None or not (args.simulate or settings.agent.source == "simulate")
    try:
        start = parse_start(args.start, None if live else args.duration, now)
    except ValueError as e:
        print(f"gpuwarden agent: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        source, extras = build_source(args, settings, now if live else start)
    except ValueError as e:
        print(f"gpuwarden agent: {e}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as e:  # noqa: BLE001 - NVML missing or failing: say so, suggest a fix
        print(f"gpuwarden agent: cannot open NVML ({type(e).__name__}: {e}); run 'gpuwarden doctor', "
              "or use --simulate SCENARIO", file=sys.stderr)
        return EXIT_FAIL
    sink = Sink(args.output, settings)
    metrics = None
    if args.metrics_port or settings.agent.metrics_port:
        metrics = _serve_metrics(args, settings, source, extras, sink.publisher)
    else:
        from gpuwarden import watchdog

        watchdog.alive_only()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    spool_events = _SpoolDrops(sink, getattr(source, "node", None) or _node_name(settings))
    try:
        if not live:
            for rec in _run_span(source, args.duration):
                sink.put(rec)
                if metrics:
                    metrics.observe(rec)
            await sink.close(drain_s=settings.agent.publish_timeout * 3)
            return EXIT_OK
        pump = asyncio.create_task(pump_forever(sink, stop))
        async for records in paced(lambda: step_with_extras(source, extras), source.tick_s, stop,
                                   duration=args.duration):
            records.extend(spool_events.check())
            sink.put(records)
            if metrics:
                metrics.observe(records)
        stop.set()
        await pump
        await sink.close(drain_s=settings.agent.publish_timeout)
        return EXIT_OK
    finally:
        stop_extras(extras)


def _serve_metrics(args: argparse.Namespace, settings: AgentSettings, source: Any, extras: list[Any],
                   publisher: Any = None) -> Any:
    """dcgm-exporter's series on the agent's port, with pod labels when the kubelet's pod-resources
    socket is there (its poller joins ``extras``, stopped with them); the publish state and
    ``/-/ready`` from ``publisher``; whether the kernel log is read."""
    from gpuwarden.producers.events import KmsgWatcher

    from gpuwarden.exposition import serve_from
    from gpuwarden.producers.metrics import COUNTERS, AgentMetrics

    cfg, owner = settings.agent, None
    if cfg.pod_resources_socket.is_socket():
        try:
            from gpuwarden.producers.podresources import PodResources

            pods = PodResources(cfg.pod_resources_socket, cfg.pod_resources_refresh).start()
        except ImportError:
            log.warning("%s exists but grpcio is not installed: no pod labels on /metrics "
                        "(pip install 'gpuwarden[kubelet]')", cfg.pod_resources_socket)
        else:
            extras.append(pods)
            owner = pods.owner
    bus_ids = source.bus_ids() if hasattr(source, "bus_ids") else {}
    metrics = AgentMetrics(bus_ids, owner, getattr(source, "dcgm_fields", None))
    metrics.publishing(publisher)
    if not (args.simulate or cfg.source == "simulate"):
        metrics.kmsg(any(isinstance(x, KmsgWatcher) for x in extras))
    serve_from(metrics.registry, cfg, args.metrics_port, COUNTERS, ready=metrics.ready)
    return metrics


def stop_extras(extras: list[Any]) -> None:
    """Stop the watcher threads and close the SDK socket that came with a live source."""
    for x in extras:
        for name in ("stop", "close"):
            fn = getattr(x, name, None)
            if fn is not None:
                fn()
                break


def _run_span(source: Source, duration: float):
    """Tick batches covering ``duration`` seconds of event time."""
    ticks = max(1, round(duration / source.tick_s))
    for _ in range(ticks):
        yield source.step()


async def pump_forever(sink: Sink, stop: asyncio.Event) -> None:
    """Publish what the sink's spool holds until ``stop``; a failure never stops the producer."""
    while not stop.is_set():
        try:
            sent = await sink.flush()
        except Exception as e:  # noqa: BLE001 - publishing must never stop sampling
            log.warning("publish failed: %s", e)
            sent = 0
        if not sent:
            try:
                await asyncio.wait_for(stop.wait(), 1.0)
            except asyncio.TimeoutError:
                pass


class _SpoolDrops:
    """Evicts the spool over its limits and turns drops into an ``agent`` event."""

    def __init__(self, sink: Sink, node: str) -> None:
        self.sink, self.node, self.seq = sink, node, 0
        self.boot_id = f"agent-{int(time.time())}"
        self._last = 0.0

    def check(self) -> list[GpuEvent]:
        spool = self.sink.spool
        now = time.time()
        if spool is None or now - self._last < 10.0 and not spool.over_limit():
            return []
        self._last = now
        dropped = spool.evict(now)
        if not dropped:
            return []
        ev = GpuEvent(ts=now, node=self.node, seq=self.seq, boot_id=self.boot_id, kind=EventKind.AGENT,
                      source="agent", count=dropped,
                      message=f"spool over its limits: dropped the {dropped} oldest records "
                              f"({spool.counter('dropped')} in total)")
        self.seq += 1
        return [ev]


def cmd_agent(args: argparse.Namespace, settings: AgentSettings) -> int:
    """``--node`` names the node over ``agent.node`` (a DaemonSet pod's host name is the pod's)."""
    if getattr(args, "node", None):
        settings.agent = settings.agent.model_copy(update={"node": args.node})
    return asyncio.run(_agent(args, settings))
