"""``gpuwarden replay``: recorded records through the same Engine as live (incident retros).

A file recorded by ``gpuwarden run --record`` (or ``agent --output``) replays to
byte-identical transitions, since the engine uses event time only. With ``--baselines SPOOL``
the task classes start from the state saved in that spool (``gpuwarden baseline bootstrap``, a
``gpuwarden run``, ``gpuwarden import``) instead of learning from the replayed records alone.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from gpuwarden.app.settings import Settings
from gpuwarden.contract import AlertTransition, encode
from gpuwarden.humantime import moment
from gpuwarden.history.sources import (
    InputRecord,
    OnReject,
    ReplayError,
    input_topics,
    read_file,
    read_kafka,
    read_spool,
    spool_path,
    time_range,
)
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.engine import Engine
from gpuwarden.streams.rules import RulesError, load_rules


def cmd_replay(args: argparse.Namespace, settings: Settings) -> int:
    """Exit 0 after the replay; 2 for bad input (rules, time range, unreadable source)."""
    paths = args.rules or [settings.engine.rules]
    if len(paths) > 2:
        print("gpuwarden replay: --rules at most twice (two rule sets to compare)", file=sys.stderr)
        return 2
    try:
        packs = [load_rules(p) for p in paths]
    except RulesError as e:
        print(e, file=sys.stderr)
        return 2
    rejected: list[str] = []

    def reject(where: str, reason: str) -> None:
        rejected.append(where)
        print(f"{where}: skipped ({reason})", file=sys.stderr)

    try:
        classes = saved_classes(args.baselines) if args.baselines else {}
        since, until = time_range(args.since, args.until, time.time())
        with _source(args, settings, since, until, reject) as source:
            records, config = _config_for(settings, source)
            engine = Engine(packs[-1], config, settings.limits.max_past_skew)
            load_classes(engine, classes)
            if classes:
                print(f"gpuwarden replay: {len(classes)} task classes start from the saved baselines",
                      file=sys.stderr)
            if args.report or len(packs) == 2:
                records = list(records)
            if len(packs) == 2:
                transitions = _compare(args, settings, records, paths, engine, classes)
            else:
                transitions = _feed(engine, records, args.json)
    except ReplayError as e:
        print(f"gpuwarden replay: {e}", file=sys.stderr)
        return 2
    if args.report:
        with open(args.report, "w", encoding="utf-8") as fh:
            fh.write(_report(engine, records, transitions, args.from_file or args.spool or f"Kafka {args.kafka}"))
        print(f"gpuwarden replay: report written to {args.report}", file=sys.stderr)
    odd = engine.counters()["implausible"]
    print(f"gpuwarden replay: {len(transitions)} alert transitions; {len(rejected)} records skipped"
          + (f"; {odd} set aside as dated over limits.max_past_skew behind their node's newest" if odd else ""),
          file=sys.stderr)
    return 0


@contextmanager
def _source(args: argparse.Namespace, settings: Settings, since: float | None, until: float | None,
            reject: OnReject) -> Iterator[Iterable[InputRecord]]:
    """The records of ``--from-file``, ``--spool`` or ``--kafka`` in ``[since, until)``."""
    if args.from_file:
        yield read_file(args.from_file, since, until, on_reject=reject)
    elif args.spool:
        from gpuwarden.spool import Spool

        with Spool(spool_path(args.spool)) as spool:
            yield read_spool(spool, since, until, topic_prefix=settings.kafka.topic_prefix,
                             on_reject=reject)
    else:
        yield _from_kafka(settings, args.kafka, since, until, reject)


def _config_for(settings: Settings, records: Iterable[InputRecord]) -> tuple[Iterable[InputRecord], EngineConfig]:
    """``records`` (unchanged) and the engine config their live run had: a recording of a
    simulation (its first record says so) judges the simulated services by the simulator's SLOs
    and max batch, as ``gpuwarden run --simulate`` did (without it a replay missed their alerts)."""
    from gpuwarden.app.standalone import engine_config

    it = iter(records)
    first = next(it, None)
    if first is None:
        return [], settings.engine
    return itertools.chain([first], it), engine_config(settings, getattr(first, "simulated", False))


def saved_classes(location: str | Path) -> dict[str, bytes]:
    """The task classes' state saved in the spool at ``location`` (its ``engine`` state: a
    bootstrap's, a live run's, else a simulation's), by class; ReplayError when there is none.
    Only the classes: the nodes' state of a later run would make every replayed record late."""
    from gpuwarden.app.standalone import LIVE_STATE, SIM_STATE, STATE_NS
    from gpuwarden.spool import Spool

    path = spool_path(location)
    with Spool(path) as spool:
        data = spool.kv_get(STATE_NS, LIVE_STATE) or spool.kv_get(STATE_NS, SIM_STATE)
    if data is None:
        raise ReplayError(f"{path}: no saved engine state ('gpuwarden baseline bootstrap' or 'gpuwarden run' "
                          "saves it)")
    try:
        return {c: v.encode() for c, v in json.loads(data)["classes"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ReplayError(f"{path}: saved engine state not readable ({type(e).__name__}: {e})") from None


def load_classes(engine: Engine, classes: dict[str, bytes]) -> None:
    """Load the classes' state (:func:`saved_classes`) into ``engine``; ReplayError when one does not load."""
    for c, data in sorted(classes.items()):
        try:
            engine.classes.load(c, data)
        except (ValueError, KeyError, TypeError) as e:
            raise ReplayError(f"saved state of task class {c!r} not loaded ({e})") from None


def _from_kafka(settings: Settings, bootstrap: str, since: float | None, until: float | None,
                reject: OnReject) -> list[InputRecord]:
    """The input topics' records in ``[since, until)`` (``--kafka``, and the console in cluster mode)."""
    import asyncio

    from gpuwarden.kafka import client_kwargs

    kw = {**client_kwargs(settings), "bootstrap_servers": bootstrap}
    return asyncio.run(read_kafka(kw, input_topics(settings.kafka.topic_prefix), since, until,
                                  slack_s=settings.limits.max_future_skew, on_reject=reject))


def _report(engine: Engine, records: list[InputRecord], transitions: list[AlertTransition], source: str) -> str:
    """The retro report of a finished replay, with the notifiers' evidence wording and the classes' bands."""
    from gpuwarden.history.retro import ReportHelpers, render_report
    from gpuwarden.notifiers.render import evidence_parts, words

    helpers = ReportHelpers(evidence=lambda ev: evidence_parts(ev, words("en")))
    baselines = {c: engine.classes.baseline(c) for c in engine.classes.classes()}
    return render_report(records, transitions, helpers, baselines=baselines, source=source,
                         slos=engine.config.slo)


def retro_html(settings: Settings, since: float, until: float) -> str:
    """The retro report of the records in ``[since, until)`` (the spool's, or the input topics'
    with ``web.source: kafka``), replayed with the config's rules (the web console's report
    links); ReplayError when the source cannot be read or has nothing then."""
    if settings.web.source == "kafka":
        from aiokafka.errors import KafkaError

        from gpuwarden.kafka import KafkaConnectError

        source, where = f"Kafka {settings.kafka.bootstrap}", "input topics on Kafka"
        try:
            records = _from_kafka(settings, settings.kafka.bootstrap, since, until, lambda where, why: None)
        except (KafkaError, KafkaConnectError, OSError, TimeoutError) as e:
            raise ReplayError(f"{source}: {e or type(e).__name__}") from None
    else:
        from gpuwarden.spool import Spool

        source, where = f"spool {settings.spool.path}", "spool"
        with Spool(settings.spool.path, settings.spool.max_bytes, settings.spool.max_age) as spool:
            records = list(read_spool(spool, since, until, topic_prefix=settings.kafka.topic_prefix))
    if not records:
        raise ReplayError(f"no records in the {where} from {moment(since)} to {moment(until)}")
    _, config = _config_for(settings, records)
    engine = Engine(load_rules(settings.engine.rules), config, settings.limits.max_past_skew)
    transitions = engine.process_many(records) + engine.flush()
    return _report(engine, records, transitions, source)


def _compare(args: argparse.Namespace, settings: Settings, records: list[InputRecord],
             paths: list[str | Path | None], engine: Engine, classes: dict[str, bytes]) -> list[AlertTransition]:
    """Both rule sets over the same records (each engine from the same saved classes); prints
    the comparison, returns B's transitions."""
    from gpuwarden.streams.compare import replay_both

    first = Engine(load_rules(paths[0]), engine.config, settings.limits.max_past_skew)
    load_classes(first, classes)
    comparison, _, b = replay_both(records, first, engine, str(paths[0]), str(paths[1]))
    sys.stdout.write(comparison.to_json() + "\n" if args.json else comparison.to_text())
    return b


def _feed(engine: Engine, records: Iterable[InputRecord], as_json: bool) -> list[AlertTransition]:
    out: list[AlertTransition] = []
    for rec in records:
        for t in engine.process(rec):
            out.append(t)
            _show(sys.stdout, t, as_json)
    for t in engine.flush():
        out.append(t)
        _show(sys.stdout, t, as_json)
    return out


def _show(out: TextIO, t: AlertTransition, as_json: bool) -> None:
    if as_json:
        out.write(encode(t).decode() + "\n")
    else:
        out.write(f"{moment(t.ts, seconds=True)}  {t.state.value:8} {t.tier.value:9} {t.rule:26} {t.summary}\n")
