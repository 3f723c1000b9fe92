"""``gpuwarden run``: source → engine → notifier in one process, the spool as the durable log.

The source is the simulator (``--simulate``, or ``agent.source: simulate``) or the
agent's NVML source (collector, XID/ECC watchers, task SDK socket); a failing NVML is
an error (exit 1), never a simulation. Every input record goes to the spool
(and to ``--record FILE`` for a later ``gpuwarden replay --from-file``); the
engine's state is saved in the spool's key/value store so a restart continues
where it stopped. With ``--duration`` a simulated span runs as fast as possible;
real GPUs are sampled in wall time, for ``--duration`` when given.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import ExitStack
from dataclasses import replace
from typing import Any, TextIO

from gpuwarden.app.live_view import Status, render
from gpuwarden.app.remediate import AutoPolicy
from gpuwarden.app.run_summary import Fired, summary, where_to_look
from gpuwarden.app.settings import Settings
from gpuwarden.contract import AlertTransition, Topics, batch_task_metrics, decode, encode, record_key, unbatch
from gpuwarden.humantime import moment, span
from gpuwarden.notifiers.delivery import reread_on_sighup
from gpuwarden.notifiers.pipeline import Notifier
from gpuwarden.producers.agent import build_source, simulated_extras, step_with_extras, stop_extras
from gpuwarden.producers.servingsim import MAX_BATCH as SIM_MAX_BATCH
from gpuwarden.producers.servingsim import SERVICES as SIM_SERVICES
from gpuwarden.producers.servingsim import SLO as SIM_SLO
from gpuwarden.producers.simulator import SCENARIOS, Simulator, scenario_list, tick_for
from gpuwarden.producers.source import Record, Source, paced
from gpuwarden.schedpolls import PollCompactor
from gpuwarden.spool import Spool
from gpuwarden.streams.config import EngineConfig, ServiceServing
from gpuwarden.streams.engine import Engine
from gpuwarden.slo import ServiceSlo
from gpuwarden.streams.rules import RulesError, load_rules
from gpuwarden.units import parse_time

STATE_NS = "engine"
SAVED_AT = ":saved-at"
"""Beside a state key: the wall time ``gpuwarden run`` last saved it (at its end, when it ended)."""
LIVE_STATE, SIM_STATE = "state", "sim-state"
"""Live sampling and simulations keep separate engine state, so a demo never disturbs a lab's baselines."""
SIMULATED_LOCAL = ("simulated GPUs (sim-* nodes): alerts are shown here and kept in the spool, and sent "
                   "to no receiver (set accept_simulated: true on a receiver to send them there)")
SAVE_EVERY_S = 30.0  # wall time between state saves (the runner, not the engine, may use the clock)
VIEW_EVERY_S = 1.0  # wall time between live-view frames
VIEW_CPU_EVERY_S = 0.5
"""And the run's own CPU time between them: a frame of 200x50 costs ~20-25 ms, so the view stays
near 5 % of the run's CPU however busy the machine (#33: redrawn every 0.5 s of wall time it took
~40 %; bench/live_view_cost.py)."""


class NoGpus(Exception):
    """NVML could not be opened and nothing asked for a simulation."""


def _source(args: argparse.Namespace, settings: Settings) -> tuple[Source, list[Any]]:
    """(source, extras): the simulator when ``--simulate`` (or ``agent.source: simulate``) asks
    for it, else the agent's NVML source with its event watchers and SDK socket. A failing NVML
    is an error, never a silent simulation: that paged on-call with invented ECC errors from
    ``node-00`` on a GPU box whose driver was broken (issue #18, defect 6). Simulated nodes are
    named ``sim-node-NN`` and their alerts labelled ``simulated=true``."""
    scenario = args.simulate
    if scenario is None and settings.agent.source != "simulate":
        try:
            return build_source(args, settings, time.time())
        except Exception as e:  # noqa: BLE001 - any NVML failure: say it and stop
            raise NoGpus(f"cannot open NVML ({type(e).__name__}: {e}): no GPUs to watch. Run 'gpuwarden "
                         "doctor' to see why, or pass --simulate SCENARIO for simulated GPUs") from None
    scenario = scenario or "mixed"
    span = args.duration or 0.0
    start = _start_ts(args.start, span)
    tick = tick_for(span or None)
    kw = {} if args.onset is None else {"onset_s": args.onset}
    names = scenario if isinstance(scenario, list) else [scenario]
    nodes = args.nodes or max(2 if n == "mixed" else SCENARIOS[n].nodes if n in SCENARIOS else 1 for n in names)
    sim = Simulator(scenario, nodes=nodes, gpus=args.gpus or 8, seed=args.seed, start_ts=start, tick_s=tick, **kw)
    return sim, simulated_extras(settings.agent, sim, live=args.duration is None)


def engine_config(settings: Settings, simulated: bool) -> EngineConfig:
    """The engine's config for a run (or a replay of a recording) whose records come from the
    simulator or not: one place, so a replay judges a simulation's services as its live run did."""
    return with_simulated_services(settings.engine) if simulated else settings.engine


def with_simulated_services(cfg: EngineConfig) -> EngineConfig:
    """A simulation's vLLM services are judged by the simulator's SLO and max batch unless the
    config declares its own for them (so ``--simulate serving-errors`` shows its burn alerts)."""
    slo = {**{s: ServiceSlo.model_validate(SIM_SLO) for s in SIM_SERVICES.values()}, **cfg.slo}
    serving = {**{s: ServiceServing(max_batch=SIM_MAX_BATCH[s]) for s in SIM_SERVICES.values()}, **cfg.serving}
    return cfg.model_copy(update={"slo": slo, "serving": serving})


def _start_ts(text: str | None, span: float) -> float:
    now = time.time()
    if text is None:
        return float(int(now - span))
    ts = parse_time(text, now)
    assert ts is not None
    return ts


async def _ticks(source: Source, extras: list[Any], args: argparse.Namespace,
                 stop: asyncio.Event) -> AsyncIterator[list[Record]]:
    """A simulated span runs as fast as possible; a live source (or a simulation without
    ``--duration``) is paced in wall time, for ``--duration`` when given."""
    if isinstance(source, Simulator) and args.duration is not None:
        end = source.ts + args.duration
        while source.ts < end - 1e-9 and not stop.is_set():
            yield source.step()
            await asyncio.sleep(0)  # let delivery tasks run between simulated ticks
        return
    async for batch in paced(lambda: step_with_extras(source, extras), source.tick_s, stop,
                             duration=args.duration):
        yield batch


class Runner:
    """Feeds batches through the engine; prints, notifies, records and saves state."""

    def __init__(self, engine: Engine, spool: Spool, topics: Topics, *, json_out: TextIO | None,
                 record: TextIO | None, notifier: Notifier | None, state_key: str) -> None:
        self.engine, self.spool, self.topics = engine, spool, topics
        self.state_key = state_key
        self.json_out, self.record, self.notifier = json_out, record, notifier
        self.now = 0.0
        self.saved_at = time.monotonic()
        self.transitions = 0
        self.polls = PollCompactor()  # scheduler records stored on change; readers expand them

    async def batch(self, records: list[Record]) -> None:
        stored = []
        out: list[AlertTransition] = []
        # As the agent publishes them (a node's task metrics of a tick as one batch), and applied
        # in the order a replay of the spool or the --record file reads them back: replay == live.
        for rec in batch_task_metrics(records):
            if self.record is not None:
                self.record.write(encode(rec).decode() + "\n")
            stored += self.polls.store(rec)
            for item in unbatch((rec,)):
                out.extend(self.engine.process(item))
                self.now = max(self.now, item.ts)
        self._store(stored)
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

    def _store(self, records: list[Any]) -> None:
        if records:  # the spool is where they go: history, nothing publishes them
            self.spool.append_many(((self.topics.for_record(r), record_key(r), r.ts, encode(r)) for r in records),
                                   published=True)

    def end(self) -> None:
        """Store what is held (a scheduler poll whose end never came) and save the state."""
        self._store(self.polls.flush())
        self.save()

    def save(self) -> None:
        """The engine's state with its event time and the wall time it was saved at (the console's
        "state as of"); records past the spool's limits go (nothing else evicts a run's spool)."""
        self.saved_at = time.monotonic()
        self.spool.kv_put(STATE_NS, self.state_key, self.engine.dump_all())
        self.spool.kv_put(STATE_NS, self.state_key + ":until", repr(self.now).encode())
        self.spool.kv_put(STATE_NS, self.state_key + SAVED_AT, repr(time.time()).encode())
        self.spool.evict(self.now)

    def restore(self, start_ts: float) -> None:
        """Continue from the saved state, unless it runs past this run's start: then every
        record would be late, so start fresh (and say so)."""
        state = self.spool.kv_get(STATE_NS, self.state_key)
        if state is None:
            return
        until = float(self.spool.kv_get(STATE_NS, self.state_key + ":until") or b"0")
        if until > start_ts:
            print(f"gpuwarden run: this run starts at {moment(start_ts)}, before the end of the state an "
                  f"earlier run saved in {self.spool.path} ({moment(until)}, {span(until - start_ts)} later); "
                  "its records would all be late, so this run starts with fresh state and replaces it. "
                  "Nothing to do, unless you meant to continue it: then pass --start after its end",
                  file=sys.stderr)
            return
        try:
            self.engine.load_all(state)
        except ValueError as e:  # written by another version
            print(f"gpuwarden run: saved engine state not loaded ({e}); starting with fresh state",
                  file=sys.stderr)
            for n in self.engine.nodes.nodes():
                self.engine.nodes.drop(n)
            for c in self.engine.classes.classes():
                self.engine.classes.drop(c)
            for n in self.engine.inference.nodes():
                self.engine.inference.drop(n)
            for n in self.engine.services.services():
                self.engine.services.drop(n)
            return
        self.now = until


async def _run(args: argparse.Namespace, settings: Settings, engine: Engine, source: Source,
               extras: list[Any]) -> int:
    from rich.console import Console
    from rich.live import Live

    with ExitStack() as stack:
        spool = Spool(settings.spool.path, settings.spool.max_bytes, settings.spool.max_age)
        stack.callback(spool.close)
        record = stack.enter_context(open(args.record, "w")) if args.record else None
        simulated = isinstance(source, Simulator)
        runner = Runner(engine, spool, Topics(settings.kafka.topic_prefix),
                        json_out=sys.stdout if args.json else None, record=record, notifier=None,
                        state_key=SIM_STATE if simulated else LIVE_STATE)
        started = source.ts if simulated else time.time()
        if (said := appending(spool)) is not None:
            print(f"gpuwarden run: {said}", file=sys.stderr)
        runner.restore(started)
        status = Status(started=started, duration=args.duration, zone=settings.notify.timezone,
                        receivers=tuple(r.name for r in settings.notify.receivers))
        # The router runs on the records' time; delivery (signatures, limits, Retry-After) on the wall clock.
        notifier = runner.notifier = Notifier(settings, spool=spool, clock=lambda: runner.now,
                                              on_routed=None if simulated else AutoPolicy.of(settings))
        if simulated and notifier.nowhere is None and not any(r.accept_simulated for r in settings.notify.receivers):
            status = replace(status, notice=SIMULATED_LOCAL)
            print(f"gpuwarden run: {SIMULATED_LOCAL}", file=sys.stderr)
        live = None
        console = Console(stderr=False)
        if not args.json and console.is_terminal:  # without one the closing summary says it all
            live = stack.enter_context(Live(console=console, auto_refresh=False, vertical_overflow="crop"))
        shown, shown_cpu = 0.0, 0.0
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        hangup = reread_on_sighup(notifier.delivery.reread_secrets)  # a rotated secret file, read again
        try:
            async for batch in _ticks(source, extras, args, stop):
                await runner.batch(batch)
                if (live is not None and time.monotonic() - shown >= VIEW_EVERY_S
                        and time.process_time() - shown_cpu >= VIEW_CPU_EVERY_S):
                    shown, shown_cpu = time.monotonic(), time.process_time()
                    live.update(render(engine, runner.now, status), refresh=True)
        except KeyboardInterrupt:
            pass
        finally:
            await runner.emit(engine.flush())
            runner.end()
            if live is not None:
                live.update(render(engine, runner.now, status), refresh=True)
            await notifier.drain_before_exit(stop)
            fired = Fired.of(decode(r.value, AlertTransition) for r in spool.read(runner.topics.alerts, since=started))
            await notifier.aclose()
            if hangup:
                loop.remove_signal_handler(signal.SIGHUP)
    counters = engine.counters()
    print(f"gpuwarden run: {runner.transitions} alert transitions; {counters['late']} late and "
          f"{counters['duplicates']} duplicate records dropped", file=sys.stderr)
    ran = (source.ts if simulated else time.time()) - started
    closing = summary(engine, fired, ran, where_to_look(getattr(args, "config", None)))
    print("\n".join(closing), file=sys.stderr if args.json else sys.stdout, flush=True)
    return 0


def appending(spool: Spool) -> str | None:
    """What a run into a spool that holds an earlier run's records does with them (None: a new spool)."""
    if spool.kv_get(STATE_NS, LIVE_STATE) is None and spool.kv_get(STATE_NS, SIM_STATE) is None:
        return None
    def mb(n: float) -> str:
        return f"{n / 1e6:.{0 if n >= 1e7 else 1}f} MB"

    return (f"appending to {spool.path} ({mb(os.path.getsize(spool.path))} on disk from earlier runs); its limits "
            f"(spool.max_bytes {mb(spool.max_bytes)}, spool.max_age {span(spool.max_age_s)}) drop the "
            "oldest records past them. Remove the file to start empty (gpuwarden demo always does)")


def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    """``gpuwarden run``: exit 0 after ``--duration`` or Ctrl-C; 2 on a bad rules file."""
    if args.list_scenarios:
        print(scenario_list())
        return 0
    try:
        rules = load_rules(args.rules or settings.engine.rules)
    except RulesError as e:
        print(e, file=sys.stderr)
        return 2
    try:
        source, extras = _source(args, settings)
    except ValueError as e:
        print(f"gpuwarden run: {e}", file=sys.stderr)
        return 2
    except NoGpus as e:
        print(f"gpuwarden run: {e}", file=sys.stderr)
        return 1
    engine = Engine(rules, engine_config(settings, isinstance(source, Simulator)), settings.limits.max_past_skew)
    try:
        return asyncio.run(_run(args, settings, engine, source, extras))
    finally:
        stop_extras(extras)
