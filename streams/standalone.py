"""``gpuwarden run``: source → engine → notifier in one process, the spool as the durable log.

The source is the simulator (``--simulate``) or NVML (when present), else the
``mixed`` simulation (said on stderr). Every input record goes to the spool
(and to ``--record FILE`` for a later ``gpuwarden replay --from-file``); the
engine's state is saved in the spool's key/value store so a restart continues
where it stopped. With ``--duration`` event time runs as fast as possible.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any, TextIO

from gpuwarden.contract import AlertTransition, Topics, encode, record_key
from gpuwarden.spool import Spool
from streams.engine import Engine
from streams.rules import RulesError, load_rules

STATE_NS, STATE_KEY = "engine", "state"
SAVE_EVERY_S = 30.0  # wall time between state saves (the runner, not the engine, may use the clock)
VIEW_EVERY_S = 0.5  # wall time between live-view frames


def _source(args: Any, settings: Any) -> tuple[Any, float]:
    """(source, start event time); NVML when present and nothing is simulated."""
    from producers.simulator import Simulator

    scenario = args.simulate
    if scenario is None:
        try:
            from producers.nvml import NvmlCollector, load_nvml

            return NvmlCollector(load_nvml()), time.time()
        except Exception as e:  # noqa: BLE001 - any NVML failure means: simulate instead
            print(f"gpuwarden run: NVML not available ({type(e).__name__}); simulating 'mixed'",
                  file=sys.stderr)
            scenario = "mixed"
    span = args.duration or 0.0
    start = _start_ts(args.start, span)
    tick = _tick_for(span)
    kw = {} if args.onset is None else {"onset_s": args.onset}
    nodes = args.nodes or (2 if scenario == "mixed" else 1)
    return Simulator(scenario, nodes=nodes, gpus=args.gpus or 8, seed=args.seed, start_ts=start,
                     tick_s=tick, **kw), start


def _tick_for(span: float) -> float:
    """A coarser tick for long simulated spans keeps a 7-day run to seconds."""
    if span > 2 * 86400:
        return 30.0
    if span > 6 * 3600:
        return 10.0
    if span > 0:
        return 5.0
    return 1.0


def _start_ts(text: str | None, span: float) -> float:
    from streams.replay_sources import parse_time

    now = time.time()
    if text is None:
        return float(int(now - span))
    ts = parse_time(text, now)
    assert ts is not None
    return ts


def _ticks(source: Any, args: Any) -> Iterator[list]:
    if args.duration is not None:
        end = source.ts + args.duration
        while source.ts < end - 1e-9:
            yield source.step()
        return
    from producers.source import paced

    yield from paced(source)


class Runner:
    """Feeds batches through the engine; prints, notifies, records and saves state."""

    def __init__(self, engine: Engine, spool: Spool, topics: Topics, *, json_out: TextIO | None,
                 record: TextIO | None, notifier: Any) -> None:
        self.engine, self.spool, self.topics = engine, spool, topics
        self.json_out, self.record, self.notifier = json_out, record, notifier
        self.now = 0.0
        self.saved_at = time.monotonic()
        self.transitions = 0

    async def batch(self, records: list) -> None:
        rows = []
        out: list[AlertTransition] = []
        for rec in records:
            data = encode(rec)
            rows.append((self.topics.for_record(rec), record_key(rec), rec.ts, data))
            if self.record is not None:
                self.record.write(data.decode() + "\n")
            out.extend(self.engine.process(rec))
            self.now = max(self.now, rec.ts)
        if rows:
            self.spool.append_many(rows)
        await self.emit(out)
        if time.monotonic() - self.saved_at >= SAVE_EVERY_S:
            self.save()

    async def emit(self, transitions: list[AlertTransition]) -> None:
        for t in transitions:
            self.transitions += 1
            if self.json_out is not None:
                self.json_out.write(encode(t).decode() + "\n")
            if self.notifier is not None:
                await self.notifier.handle(t)
        if self.json_out is not None and transitions:
            self.json_out.flush()
        if self.notifier is not None:
            await self.notifier.tick(self.now)

    def save(self) -> None:
        self.saved_at = time.monotonic()
        self.spool.kv_put(STATE_NS, STATE_KEY, self.engine.dump_all())


def _notifier(settings: Any, spool: Spool, runner_clock: Any) -> Any:
    try:
        from notifiers.pipeline import Notifier
    except ImportError:
        return None
    return Notifier(settings, spool=spool, clock=runner_clock)


async def _run(args: Any, settings: Any, engine: Engine, source: Any) -> int:
    from rich.console import Console
    from rich.live import Live

    from streams.live_view import render

    with ExitStack() as stack:
        spool = Spool(settings.spool.path, settings.spool.max_bytes, settings.spool.max_age)
        stack.callback(spool.close)
        state = spool.kv_get(STATE_NS, STATE_KEY)
        if state is not None:
            engine.load_all(state)
        record = stack.enter_context(open(args.record, "w")) if args.record else None
        runner = Runner(engine, spool, Topics(settings.kafka.topic_prefix),
                        json_out=sys.stdout if args.json else None, record=record, notifier=None)
        runner.notifier = _notifier(settings, spool, lambda: runner.now)
        live = None
        if not args.json:
            live = stack.enter_context(Live(console=Console(stderr=False), auto_refresh=False))
        shown = 0.0
        try:
            for batch in _ticks(source, args):
                await runner.batch(batch)
                if live is not None and time.monotonic() - shown >= VIEW_EVERY_S:
                    shown = time.monotonic()
                    live.update(render(engine, runner.now), refresh=True)
        except KeyboardInterrupt:
            pass
        finally:
            await runner.emit(engine.flush())
            runner.save()
            if live is not None:
                live.update(render(engine, runner.now), refresh=True)
            if runner.notifier is not None:
                await runner.notifier.aclose()
    counters = engine.counters()
    print(f"gpuwarden run: {runner.transitions} alert transitions; {counters['late']} late and "
          f"{counters['duplicates']} duplicate records dropped", file=sys.stderr)
    return 0


def cmd_run(args: Any, settings: Any) -> int:
    """``gpuwarden run``: exit 0 after ``--duration`` or Ctrl-C; 2 on a bad rules file."""
    if args.list_scenarios:
        from producers.simulator import scenario_list

        print(scenario_list())
        return 0
    try:
        rules = load_rules(args.rules or settings.engine.rules)
    except RulesError as e:
        print(e, file=sys.stderr)
        return 2
    try:
        source, _ = _source(args, settings)
    except ValueError as e:
        print(f"gpuwarden run: {e}", file=sys.stderr)
        return 2
    engine = Engine(rules, settings.engine)
    return asyncio.run(_run(args, settings, engine, source))
