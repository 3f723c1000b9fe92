"""``gpuwarden replay``: recorded records through the same Engine as live (incident retros).

A file recorded by ``gpuwarden run --record`` (or ``agent --output``) replays to
byte-identical transitions, since the engine uses event time only.
"""

from __future__ import annotations

import sys
from typing import Any

from gpuwarden.contract import encode
from streams.engine import Engine
from streams.replay_sources import ReplayError, read_file, read_spool, spool_path, time_range
from streams.rules import RulesError, load_rules


def cmd_replay(args: Any, settings: Any) -> int:
    """Exit 0 after the replay; 1 for what this build cannot do yet; 2 for bad input."""
    if args.kafka:
        print("gpuwarden replay --kafka: not yet available (use --from-file or --spool)", file=sys.stderr)
        return 1
    if args.report:
        print("gpuwarden replay --report: not yet available", file=sys.stderr)
        return 1
    if args.rules and len(args.rules) > 1:
        print("gpuwarden replay: comparing two rule sets is not yet available", file=sys.stderr)
        return 1
    try:
        rules = load_rules(args.rules[0] if args.rules else settings.engine.rules)
    except RulesError as e:
        print(e, file=sys.stderr)
        return 2
    import time

    rejected: list[str] = []

    def reject(where: str, reason: str) -> None:
        rejected.append(where)
        print(f"{where}: skipped ({reason})", file=sys.stderr)

    engine = Engine(rules, settings.engine)
    count = 0
    try:
        since, until = time_range(args.since, args.until, time.time())
        if args.from_file:
            records = read_file(args.from_file, since, until, on_reject=reject)
            count = _feed(engine, records, args.json)
        else:
            from gpuwarden.spool import Spool

            with Spool(spool_path(args.spool)) as spool:
                records = read_spool(spool, since, until, topic_prefix=settings.kafka.topic_prefix,
                                     on_reject=reject)
                count = _feed(engine, records, args.json)
    except ReplayError as e:
        print(f"gpuwarden replay: {e}", file=sys.stderr)
        return 2
    print(f"gpuwarden replay: {count} alert transitions; {len(rejected)} records skipped",
          file=sys.stderr)
    return 0


def _feed(engine: Engine, records: Any, as_json: bool) -> int:
    count = 0
    out = sys.stdout
    for rec in records:
        for t in engine.process(rec):
            count += 1
            _show(out, t, as_json)
    for t in engine.flush():
        count += 1
        _show(out, t, as_json)
    return count


def _show(out: Any, t: Any, as_json: bool) -> None:
    if as_json:
        out.write(encode(t).decode() + "\n")
    else:
        out.write(f"{t.ts:.0f} {t.state.value:8} {t.tier.value:9} {t.rule:26} {t.summary}\n")
