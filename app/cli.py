"""``gpuwarden`` command line: argument parsing only; each command lives in its room or here.

Handlers are named ``module:function`` and imported on use, so ``gpuwarden
--help`` stays fast and a room's heavy imports (aiokafka, httpx) load only for the
commands that need them. A handler takes ``(args, settings)`` and returns an
exit status.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from typing import Any

from gpuwarden import __version__, outage
from gpuwarden.app.settings import Settings, load_settings
from gpuwarden.config import ConfigError, config_warnings
from gpuwarden.kafka import KafkaConnectError
from gpuwarden.units import parse_duration

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number of at least 1, got {value}")
    return value


def _add_config(p: argparse.ArgumentParser, default: Any = None) -> None:
    """``default=argparse.SUPPRESS`` on a sub-action, so its unset --config keeps the parent's."""
    p.add_argument("--config", metavar="FILE", default=default,
                   help="YAML config (default: $GPUWARDEN_CONFIG, ./gpuwarden.yaml, built-in defaults)")


def _add_simulation(p: argparse.ArgumentParser, many: bool = False) -> None:
    p.add_argument("--simulate", metavar="SCENARIO", nargs="+" if many else None,
                   help="simulated GPUs running SCENARIO (see 'gpuwarden run --list-scenarios'; default: the real GPUs, through NVML)")
    p.add_argument("--nodes", type=_positive_int, default=None, help="simulated nodes (default 1)")
    p.add_argument("--gpus", type=_positive_int, default=None, help="simulated GPUs per node (default 8)")
    p.add_argument("--seed", type=int, default=0, help="simulation seed (default 0)")
    p.add_argument("--duration", type=_duration, metavar="SPAN", default=None,
                   help="run through SPAN of event time as fast as possible, then exit (e.g. 2h); "
                        "simulated GPUs then tick every 5 s up to 6h, 10 s up to 2d, 30 s beyond "
                        "(in real time: every second, agent.fast_interval for the agent; default: until Ctrl-C)")
    p.add_argument("--start", metavar="TIME", default=None,
                   help="simulated clock start (ISO 8601, UTC unless it has an offset; epoch seconds; or 2h ago; default: SPAN before now)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuwarden",
        description="Event-streaming alerts for GPU fleets: per-task baselines, trends and "
                    "durations, tiered to chat and on-call.",
    )
    parser.add_argument("--version", action="version", version=f"gpuwarden {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("run", help="everything in one process, no Kafka (agent → engine → notifiers)")
    _add_config(p)
    _add_simulation(p)
    p.add_argument("--json", action="store_true", help="print every alert transition as a JSON line")
    p.add_argument("--rules", metavar="FILE", help="rules file (default: the config's, else the default pack)")
    p.add_argument("--list-scenarios", action="store_true", help="list simulator scenarios and exit")
    p.add_argument("--record", metavar="FILE.jsonl",
                   help="also write every input record to FILE (replay it with 'gpuwarden replay --from-file'; default: not written)")
    p.add_argument("--onset", type=_duration, metavar="SPAN", default=None,
                   help="simulated faults start SPAN after the start (default 3m)")
    p.set_defaults(handler="gpuwarden.app.standalone:cmd_run")

    p = sub.add_parser("demo", help="gpuwarden run with baselines that form within the run (make demo)")
    p.add_argument("--duration", metavar="SPAN", default=None,
                   help="how long (default: 6h of simulated event time; 40m of wall time on real GPUs)")
    p.add_argument("--simulate", action="store_true", help="simulated GPUs even where NVML works (default: off)")
    p.add_argument("--dir", metavar="DIR", default="var/demo",
                   help="the demo's state, replaced at each start (default var/demo)")
    p.add_argument("--json", action="store_true", help="print alert transitions as JSON lines, no live view (default: off)")
    p.add_argument("--config", metavar="FILE", default=None,
                   help="a config whose sections (receivers, say) the demo keeps, its engine and spool settings "
                        "replaced (default: none)")
    p.set_defaults(handler="gpuwarden.app.demo:cmd_demo", needs_settings=False)

    p = sub.add_parser("agent", help="node agent: sample GPUs and events, publish to Kafka or a file")
    _add_config(p)
    _add_simulation(p, many=True)
    p.add_argument("--output", metavar="FILE.jsonl", help="write contract records to FILE instead of Kafka (default: Kafka)")
    p.add_argument("--metrics-port", type=int, default=None, help="serve Prometheus /metrics on this port (default: agent.metrics_port; off when unset)")
    p.add_argument("--node", default=None, help="this node's name (default: agent.node, else the host name); "
                   "the Helm chart passes the Kubernetes node's")
    p.set_defaults(handler="gpuwarden.producers.agent:cmd_agent")

    p = sub.add_parser("scheduler", help="scheduler collector (one per cluster): jobs and GPU capacity to Kafka or a file")
    _add_config(p)
    kind = p.add_mutually_exclusive_group(required=True)
    kind.add_argument("--slurm", action="store_true", help="poll Slurm (squeue/sinfo --json; SLURM_CONF as usual)")
    kind.add_argument("--kubernetes", action="store_true", help="list pods asking for nvidia.com/gpu (needs gpuwarden[kubernetes])")
    p.add_argument("--cluster", default=None, help="the cluster's name (default: scheduler.cluster)")
    p.add_argument("--output", metavar="FILE.jsonl", help="write contract records to FILE instead of Kafka (default: Kafka)")
    p.add_argument("--polls", type=_positive_int, default=None, metavar="N", help="stop after N polls (default: run until stopped)")
    p.add_argument("--metrics-port", type=int, default=None,
                   help="serve Prometheus /metrics on this port (default: scheduler.metrics_port; off when unset)")
    p.set_defaults(handler="gpuwarden.producers.scheduler:cmd_scheduler")

    p = sub.add_parser("streams", help="stream worker (Kafka consumer group, exactly once): baselines, rules, tiers")
    _add_config(p)
    p.add_argument("--worker-id", default=None, help="distinguishes workers sharing partitions (default: the host name)")
    p.add_argument("--data-dir", metavar="DIR", default=None,
                   help="where records too large for their topic are kept, unsent.jsonl (default: var/streams/<worker-id>)")
    p.add_argument("--metrics-port", type=int, default=None,
                   help="serve Prometheus /metrics on this port (default: engine.metrics_port; off when unset)")
    p.set_defaults(handler="gpuwarden.streams.worker:cmd_streams")

    p = sub.add_parser("notify", help="notifier worker: route alerts from Kafka to chat and on-call")
    _add_config(p)
    p.add_argument("--log", type=_positive_int, nargs="?", const=50, default=None, metavar="N",
                   help="print the last N delivery-log entries (default 50) and exit")
    p.add_argument("--no-kafka", action="store_true",
                   help="serve only Alertmanager's webhook (notify.alertmanager_webhook), no Kafka")
    p.add_argument("--metrics-port", type=int, default=None,
                   help="serve Prometheus /metrics on this port (default: notify.metrics_port; off when unset)")
    p.set_defaults(handler="gpuwarden.app.remediate:cmd_notify")  # the worker, with remediation.auto

    p = sub.add_parser("replay", help="feed recorded records through the engine (incident retros)")
    _add_config(p)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--from-file", metavar="FILE.jsonl", help="JSONL file of contract records")
    src.add_argument("--spool", metavar="DIR", help="a spool directory or file")
    src.add_argument("--kafka", metavar="BOOTSTRAP", help="a Kafka cluster, with --since/--until")
    p.add_argument("--since", metavar="T", help="start of the time range (ISO 8601, epoch or e.g. 2h ago; default: the oldest record)")
    p.add_argument("--until", metavar="T", help="end of the time range (default: the newest record)")
    p.add_argument("--rules", metavar="FILE", action="append",
                   help="rules file; give it twice to compare two rule sets (default: the config's, else the default pack)")
    p.add_argument("--json", action="store_true", help="print alert transitions as JSON lines")
    p.add_argument("--report", metavar="FILE.html", help="write a self-contained retro report (default: none)")
    p.add_argument("--baselines", metavar="SPOOL",
                   help="start from the task-class baselines saved in this spool (a spool directory or file: "
                        "'gpuwarden baseline bootstrap', 'gpuwarden run', 'gpuwarden import' save them; "
                        "default: none, the classes learn from the replayed records)")
    p.set_defaults(handler="gpuwarden.app.replay:cmd_replay")

    p = sub.add_parser("rules", help="rule files")
    rsub = p.add_subparsers(dest="rules_command", metavar="ACTION", required=True)
    rc = rsub.add_parser("check", help="validate a rules file (exit 0 valid, 2 invalid)")
    rc.add_argument("file", metavar="FILE", help="the rules file (YAML)")
    rc.set_defaults(handler="gpuwarden.streams.rules:cmd_check")

    p = sub.add_parser("config", help="configuration files")
    csub = p.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    cc = csub.add_parser("check", help="validate a config file (exit 0 valid, 2 invalid)")
    cc.add_argument("file", metavar="FILE", help="the config file (YAML)")
    cc.set_defaults(handler="gpuwarden.app.cli:cmd_config_check", needs_settings=False)

    p = sub.add_parser("silence", help="silence alerts by label matchers")
    _add_config(p)
    ssub = p.add_subparsers(dest="silence_command", metavar="ACTION", required=True)
    sa = ssub.add_parser("add", help="add a silence, e.g. node=gpu-07 rule=~thermal.*")
    sa.add_argument("matchers", nargs="+", metavar="MATCHER",
                    help="label=value, label!=value, label=~regex or label!~regex; all must match")
    sa.add_argument("--for", dest="duration", type=_duration, default=3600.0, metavar="SPAN",
                    help="how long the silence lasts (default 1h)")
    sa.add_argument("--comment", default="", help="why, shown with the silence (default: none)")
    sa.add_argument("--by", default=None, help="who (default: $USER)")
    sl = ssub.add_parser("list", help="list active silences")
    se = ssub.add_parser("expire", help="end a silence now")
    se.add_argument("id", help="the silence's id (as 'silence list' shows it)")
    for action in (sa, sl, se):  # --config before or after the action
        _add_config(action, argparse.SUPPRESS)
    p.set_defaults(handler="gpuwarden.notifiers.control_cli:cmd_silence")

    p = sub.add_parser("ack", help="acknowledge an alert: stops repeats and escalation")
    _add_config(p)
    p.add_argument("fingerprint", help="the alert's fingerprint, or a unique prefix of it (as messages show it)")
    p.add_argument("--comment", default="", help="a note kept with the acknowledgement (default: none)")
    p.add_argument("--by", default=None, help="who (default: $USER)")
    p.set_defaults(handler="gpuwarden.notifiers.control_cli:cmd_ack")

    p = sub.add_parser("act", help="confirm the action an alert offers: drain its node in the scheduler, or resume it")
    _add_config(p)
    p.add_argument("fingerprint", help="the alert's fingerprint, or a unique prefix of it (as messages show it)")
    p.add_argument("action", choices=["drain", "resume"],
                   help="drain: take the node out of scheduling (remediation.backend); resume: undo gpuwarden's drain")
    p.add_argument("--by", default=None, help="who confirms, kept in the audit record (default: $USER)")
    p.set_defaults(handler="gpuwarden.app.remediate:cmd_act")

    p = sub.add_parser("report", help="reports from history")
    _add_config(p)
    rsub = p.add_subparsers(dest="report_command", metavar="KIND", required=True)
    ru = rsub.add_parser("usage", help="card-hours, idle allocated card-hours, reruns and cost")
    ru.add_argument("--since", default="7d", metavar="SPAN", help="start of the period (a span back from --until, or a time; default 7d)")
    ru.add_argument("--by", choices=["user", "project", "task-class"], default="user", help="one row per (default: user)")
    ru.add_argument("--price-per-gpu-hour", type=float, default=None, metavar="X",
                    help="cost of one card-hour (default: accounting.price_per_gpu_hour)")
    ru.add_argument("--format", choices=["table", "csv", "json"], default="table",
                    help="table and CSV round figures for reading, JSON keeps full precision (default: table)")
    ru.add_argument("--until", metavar="T", help="end of the period (default: now)")
    ru.add_argument("--idle-util-below", type=float, default=None, metavar="PCT",
                    help="a held GPU under this utilization is idle (default: accounting.idle_util_below, 5)")
    ru.add_argument("--post", action="store_true",
                    help="post the last 7 days to accounting.digest_receiver (the weekly digest) instead")
    ru.set_defaults(handler="gpuwarden.app.usage:cmd_report_usage")

    rs = rsub.add_parser("scheduler", help="queue waits, attempts, retried jobs and GPU-hours from job records")
    rs.add_argument("--since", default="7d", metavar="T", help="start (ISO 8601, UTC unless it has an offset; epoch; or a span back; default 7d)")
    rs.add_argument("--until", metavar="T", help="end of the period (default: now)")
    rs.add_argument("--by", choices=["user", "project", "partition", "gpus"], default="user", help="one row per (default: user)")
    rs.add_argument("--format", choices=["table", "csv", "json"], default="table",
                    help="table and CSV round figures for reading, JSON keeps full precision (default: table)")
    rs.set_defaults(handler="gpuwarden.history.queues:cmd_report_scheduler")
    for action in (ru, rs):  # --config before or after the kind
        _add_config(action, argparse.SUPPRESS)

    p = sub.add_parser("import-jobs", help="load a scheduler's past job log into the spool (sacct --json, Philly trace)")
    _add_config(p)
    p.add_argument("file", metavar="FILE", help="the job log")
    p.add_argument("--format", choices=["sacct", "philly"], required=True,
                   help="the log's format: sacct (Slurm's `sacct --json --duplicates`) or philly")
    p.add_argument("--cluster", default=None,
                   help="the cluster name the records carry (default: sacct's own per job; 'default' for philly)")
    p.add_argument("--timezone", metavar="TZ", default=None,
                   help="zone of times written without one (default UTC; sacct's epoch seconds need none)")
    p.set_defaults(handler="gpuwarden.history.joblog:cmd_import_jobs")

    p = sub.add_parser("baseline", help="task-class baselines")
    _add_config(p)
    bsub = p.add_subparsers(dest="baseline_command", metavar="ACTION", required=True)
    bb = bsub.add_parser("bootstrap", help="learn class baselines from history instead of waiting the observation period")
    src = bb.add_mutually_exclusive_group(required=True)
    src.add_argument("--from-prometheus", metavar="URL", help="a Prometheus scraping dcgm-exporter or gpuwarden agents")
    src.add_argument("--from-file", metavar="FILE.jsonl", help="a recording (run --record, agent --output)")
    src.add_argument("--spool", metavar="DIR", help="a spool directory or file")
    bb.add_argument("--since", default="14d", metavar="T", help="start of the history (default 14d)")
    bb.add_argument("--until", metavar="T", help="end of the history (default now)")
    bb.add_argument("--step", type=_duration, default=None, metavar="SPAN",
                    help="Prometheus: query step (default engine.bucket)")
    bb.add_argument("--class-label", default="task", metavar="LABEL",
                    help="Prometheus: the label naming the task class (default 'task': gpuwarden's process series; "
                         "dcgm-exporter on Kubernetes: e.g. container)")
    bb.add_argument("--to-kafka", action="store_true",
                    help="write the classes' state to the stream workers' class-state changelog (kafka: of the "
                         "config; gpuwarden streams sites) instead of the spool")
    bb.add_argument("--replace", action="store_true",
                    help="drop live engine state already in the spool (--to-kafka: the workers' state of the classes)")
    bb.set_defaults(handler="gpuwarden.app.bootstrap:cmd_bootstrap")
    _add_config(bb, argparse.SUPPRESS)  # --config before or after the action

    p = sub.add_parser("export", help="write portable history (compressed JSONL + manifest)")
    _add_config(p)
    p.add_argument("--since", metavar="T", help="start (ISO 8601, epoch or e.g. 7d ago; default: the oldest record)")
    p.add_argument("--until", metavar="T", help="end (default: the newest record)")
    p.add_argument("--out", metavar="FILE", required=True, help="the file to write (.jsonl.gz and its manifest)")
    p.set_defaults(handler="gpuwarden.history.portable:cmd_export")

    p = sub.add_parser("import", help="load portable history into the spool or Kafka")
    _add_config(p)
    p.add_argument("file", metavar="FILE", help="a file 'gpuwarden export' wrote")
    p.add_argument("--kafka", metavar="BOOTSTRAP", help="import into this Kafka cluster instead of the spool (default: the spool)")
    p.set_defaults(handler="gpuwarden.history.portable:cmd_import")

    p = sub.add_parser("doctor", help="check NVML, driver, persistence mode, kmsg, socket and Kafka")
    _add_config(p)
    p.set_defaults(handler="gpuwarden.app.doctor:cmd_doctor")

    p = sub.add_parser("web", help="the web console: fleet, open alerts with evidence, baselines, SLOs, silences, retros")
    _add_config(p)
    p.add_argument("--bind", metavar="ADDR", default=None,
                   help="address to listen on (default: web.bind, 127.0.0.1; another needs web.token or web.basic_auth)")
    p.add_argument("--port", type=int, default=None, metavar="P", help="port (default: web.port, 8470; 0: any free port)")
    p.add_argument("--source", choices=("spool", "kafka"), default=None,
                   help="spool: what gpuwarden run writes; kafka: the alerts and control topics (cluster mode) "
                        "(default: web.source, spool)")
    p.set_defaults(handler="gpuwarden.app.web:cmd_web")

    p = sub.add_parser("test-notify", help="send a test message to every configured receiver")
    _add_config(p)
    p.add_argument("--receiver", action="append", help="only this receiver (repeatable; default: every receiver)")
    p.set_defaults(handler="gpuwarden.notifiers.worker:cmd_test_notify")

    return parser


def cmd_config_check(args: argparse.Namespace, settings: Settings | None = None) -> int:
    """Validate a config file: exit 0 and say so, or exit 2 naming file, key path and expectation."""
    try:
        loaded = load_settings(args.file)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return EXIT_USAGE
    for w in config_warnings(loaded):
        print(f"{args.file}: warning: {w}", file=sys.stderr)
    print(f"{args.file}: ok")
    return EXIT_OK


def _resolve(target: str) -> Any:
    module, _, func = target.partition(":")
    return getattr(importlib.import_module(module), func)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    outage.install()  # Kafka trouble: one line per cause per 30 s, one on recovery (gpuwarden/outage.py)
    settings = None
    if getattr(args, "needs_settings", True):
        try:
            settings = load_settings(getattr(args, "config", None))
        except ConfigError as e:
            print(e, file=sys.stderr)
            return EXIT_USAGE
        for w in config_warnings(settings):
            logging.getLogger("gpuwarden.config").warning("%s", w)
    try:
        handler = _resolve(args.handler)
    except (ImportError, AttributeError):
        print(f"gpuwarden {args.command}: not available in this build", file=sys.stderr)
        return EXIT_FAIL
    try:
        return int(handler(args, settings) or 0)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return EXIT_USAGE
    except KafkaConnectError as e:
        print(f"gpuwarden {args.command}: {e}", file=sys.stderr)
        return EXIT_FAIL
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
