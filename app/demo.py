"""``gpuwarden demo`` (``make demo``): what gpuwarden is for, in one run.

Baselines appear within the run: the demo config (``app/demo.yaml``) shortens the observation
period to 30 min, so task classes get their bands and a task that falls below its class's band
raises a deviation alert. Real GPUs when NVML opens (40 min of wall time unless ``--duration``:
baselines form after 30 min); otherwise it says so and simulates two nodes of eight GPUs (and
``mixed``'s own: three, and five the scheduler alone knows) through 6 h of event time. Each demo starts from fresh state in ``var/demo/`` (replacing the last demo's), so a second ``make demo``
behaves like the first; the config it wrote there lets ``gpuwarden web`` show the same run.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import yaml

from gpuwarden.app.settings import Settings, load_settings
from gpuwarden.config import ConfigError

DEMO_CONFIG = Path(__file__).with_name("demo.yaml")
SIMULATED_SPAN = "6h"
DEMO_NODES, DEMO_GPUS = 2, 8  # asked of the simulator (mixed adds a node of its own)
REAL_SPAN = "40m"  # baselines need 30 min of task summaries (the observation period and min samples)


def _nvml_reason() -> str | None:
    """None when NVML opens here, else why not."""
    from gpuwarden.producers.nvml import load_nvml

    try:
        load_nvml()
    except Exception as e:  # noqa: BLE001 - any failure means: no real GPUs to show
        return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    return None


def simulated_fleet() -> str:
    """The demo's simulated fleet in the words the live view, the console and the summary use:
    ``mixed`` adds a node (gpus-unused's) to the two asked for, and its scheduler scenarios add
    partitions of nodes that are scheduled, never sampled."""
    from gpuwarden.producers.schedsim import PARTITIONS
    from gpuwarden.producers.simulator import Simulator

    sim = Simulator("mixed", nodes=DEMO_NODES, gpus=DEMO_GPUS, start_ts=0.0)
    only = sorted(n for _, names, _ in PARTITIONS.values() for n in names)
    gpus = sum(len(n.gpus) for n in sim.nodes)
    return (f"{len(sim.nodes)} nodes with {gpus} GPUs sampled; {len(only)} known only from the scheduler "
            f"({', '.join(only)})")


def _config(user: str | None) -> dict:
    """The user's config (its receivers, say) with the demo's engine settings over it."""
    try:
        config = yaml.safe_load(Path(user).read_text()) or {} if user else {}
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(str(user), [f"cannot read the config: {e}"]) from None
    if not isinstance(config, dict):
        raise ConfigError(str(user), ["expected a mapping of sections"])
    for section, values in yaml.safe_load(DEMO_CONFIG.read_text()).items():
        config[section] = {**(config.get(section) or {}), **values}
    return config


def cmd_demo(args: argparse.Namespace, settings: Settings | None = None) -> int:
    """Write the demo's config (``--config``'s, with the demo's engine settings) into a fresh ``--dir``,
    then ``gpuwarden run`` with it."""
    from gpuwarden.app.cli import build_parser
    from gpuwarden.app.standalone import cmd_run

    state = Path(args.dir)
    if state.exists():
        shutil.rmtree(state)
    state.mkdir(parents=True)
    config = _config(args.config)
    config["spool"] = {"path": str((state / "spool.db").resolve())}
    config_path = state / "gpuwarden.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    why_not = None if args.simulate else _nvml_reason()
    run = ["run", "--config", str(config_path)]
    if args.simulate or why_not is not None:
        said = "as asked" if args.simulate else f"because NVML is not available here: {why_not}"
        print(f"gpuwarden demo: simulated GPUs, {said}; {simulated_fleet()} through "
              f"{args.duration or SIMULATED_SPAN} of event time, as fast as possible", file=sys.stderr)
        run += ["--simulate", "mixed", "--nodes", str(DEMO_NODES), "--gpus", str(DEMO_GPUS),
                "--duration", args.duration or SIMULATED_SPAN]
    else:
        print(f"gpuwarden demo: watching this machine's GPUs (NVML) for {args.duration or REAL_SPAN} of wall "
              "time; task classes get baselines after about 30 min of it (Ctrl-C stops it)", file=sys.stderr)
        run += ["--duration", args.duration or REAL_SPAN]
    print(f"gpuwarden demo: fresh state in {state}/ (each demo replaces the last); after it, "
          f"'gpuwarden web --config {config_path}' shows the same run in a browser", file=sys.stderr, flush=True)
    run_args = build_parser().parse_args(run + (["--json"] if args.json else []))
    return cmd_run(run_args, load_settings(config_path))
