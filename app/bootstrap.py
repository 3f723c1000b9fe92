"""``gpuwarden baseline bootstrap``: task-class baselines from history, so a site does not wait
``engine.observation_period`` (14 days) of "learning" before its first deviation alert.

Sources: a Prometheus that already scrapes dcgm-exporter or gpuwarden agents (history's
:mod:`gpuwarden.history.prometheus` rebuilds the task summaries), a recording (``--from-file``,
``run --record`` or ``agent --output``) or a spool (``--spool``), whose records go through stage 1 to
make the summaries. Stage 2 (the streams' ``ClassStage``) learns from them in time order, and the
classes' state is saved where ``gpuwarden run`` restores it (the spool of this config); node state
is not kept (only the baselines are history's to give). A report says, per class, the hours found
and whether it still learns, and why.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from collections.abc import Iterable

from gpuwarden.app.settings import Settings
from gpuwarden.app.standalone import LIVE_STATE, STATE_NS, Runner
from gpuwarden.contract import TaskSummary, Topics
from gpuwarden.history.prometheus import PromClient, PrometheusError, summaries
from gpuwarden.history.sources import ReplayError, read_file, read_spool, spool_path, time_range
from gpuwarden.spool import Spool
from gpuwarden.streams.engine import Engine, StageOutput
from gpuwarden.streams.rules import RulesError, load_rules


def _from_records(engine: Engine, records: Iterable) -> list[TaskSummary]:
    """Stage 1 over the records: the summaries it makes (its alerts are not this command's)."""
    out = StageOutput([], [])
    for r in records:
        engine.nodes.process(r, out=out)
        out.transitions.clear()
    out.summaries.extend(engine.nodes.flush().summaries)
    return out.summaries


def _report(engine: Engine, sums: list[TaskSummary], interval: float) -> str:
    windows: dict[str, set[float]] = defaultdict(set)
    for s in sums:
        windows[s.task].add(s.ts)
    cfg = engine.config
    lines = [f"{len(sums)} task summaries ({interval:g} s windows) for {len(windows)} task classes:"]
    for cls in sorted(windows):
        ends = sorted(windows[cls])
        hours = len(ends) * interval / 3600.0
        util = engine.classes.baseline(cls).get("util_gpu")
        if util is not None:
            state = f"baseline util {util.median:.0f} % ({util.low:.0f}-{util.high:.0f})"
        elif ends[-1] - ends[0] < cfg.observation_period:
            state = (f"still learning: {(ends[-1] - ends[0]) / 86400:.1f} d of history, the observation "
                     f"period is {cfg.observation_period / 86400:g} d")
        else:
            state = f"still learning: fewer than {cfg.baseline_min_samples} summaries without an alert"
        lines.append(f"  {cls}: {hours:.1f} h; {state}")
    return "\n".join(lines) + "\n"


def cmd_bootstrap(args: argparse.Namespace, settings: Settings) -> int:
    """Exit 0 with the state saved; 1 when the source fails; 2 for bad input or a state in the way."""
    try:
        rules = load_rules(settings.engine.rules)
        since, until = time_range(args.since, args.until, time.time())
    except (RulesError, ReplayError) as e:
        print(f"gpuwarden baseline bootstrap: {e}", file=sys.stderr)
        return 2
    until = until or time.time()
    engine = Engine(rules, settings.engine, settings.limits.max_past_skew)
    interval = float(settings.engine.summary_interval)
    with Spool(settings.spool.path, settings.spool.max_bytes, settings.spool.max_age) as spool:
        if spool.kv_get(STATE_NS, LIVE_STATE) is not None and not args.replace:
            print("gpuwarden baseline bootstrap: this spool already holds live engine state (baselines "
                  "learned live); --replace drops it for the bootstrapped one", file=sys.stderr)
            return 2
        try:
            if args.from_prometheus:
                client = PromClient(args.from_prometheus)
                try:
                    sums = summaries(client, since=since or until - 14 * 86400, until=until,
                                     step=float(args.step or settings.engine.bucket), interval=interval,
                                     class_label=args.class_label)
                finally:
                    client.close()
            elif args.from_file:
                sums = _from_records(engine, read_file(args.from_file, since, until))
            else:
                with Spool(spool_path(args.spool)) as source:
                    sums = _from_records(engine, read_spool(source, since, until,
                                                            topic_prefix=settings.kafka.topic_prefix))
        except PrometheusError as e:
            print(f"gpuwarden baseline bootstrap: {e}", file=sys.stderr)
            return 1
        except ReplayError as e:
            print(f"gpuwarden baseline bootstrap: {e}", file=sys.stderr)
            return 2
        for n in engine.nodes.nodes():
            engine.nodes.drop(n)
        for s in sorted(sums, key=lambda s: (s.ts, s.node, s.task_id)):
            engine.classes.process(s)
        engine.classes.flush()
        runner = Runner(engine, spool, Topics(settings.kafka.topic_prefix), json_out=None, record=None,
                        notifier=None, state_key=LIVE_STATE)
        runner.now = max((s.ts for s in sums), default=since or 0.0)
        runner.save()
    sys.stdout.write(_report(engine, sums, interval))
    print(f"saved the classes' state in {settings.spool.path} (gpuwarden run continues from it)", file=sys.stderr)
    return 0
