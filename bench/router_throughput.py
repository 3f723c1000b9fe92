"""Router decisions per second: transitions in (plus timer ticks), notifications out.

Usage: .venv/bin/python bench/router_throughput.py [TRANSITIONS]

A synthetic fleet (64 nodes x 8 GPUs, many users/projects): 70 % attention,
20 % critical, 10 % info, every alert resolving later; the clock advances 0.2 s
per transition and the router ticks every simulated second. Variants run side
by side: the default policy, then with 200 active silences (none matching, the
worst case: every one is checked), and with a lost GPU inhibiting one node.
"""

from __future__ import annotations

import random
import sys
import time

from gpuwarden.contract import AlertState, AlertTransition, Silence
from gpuwarden.notifiers.config import NotifyConfig, parse_matcher
from gpuwarden.notifiers.control import ControlState
from gpuwarden.notifiers.router import Router

T0 = 1_700_000_000.0


def config() -> NotifyConfig:
    names = ["team-chat", "pager", "lead"] + [f"chat-{i}" for i in range(8)]
    return NotifyConfig.model_validate({
        "receivers": [{"name": n, "webhook": {"url": {"env": "UNUSED"}}} for n in names],
        "team": "team-chat",
        "owners": {"projects": {f"p{i}": f"chat-{i}" for i in range(8)}},
        "schedules": {"primary": {"rotation": "weekly", "start": T0, "users": ["ann", "ben", "cat"]}},
        "escalation": [{"receivers": ["pager"], "schedule": "primary"}, {"after": "15m", "receivers": ["lead"]}],
    })


def workload(n: int, seed: int = 7) -> list[AlertTransition]:
    rng = random.Random(seed)
    out: list[AlertTransition] = []
    open_: list[AlertTransition] = []
    t = T0
    while len(out) < n:
        t += 0.2
        if open_ and rng.random() < 0.45:
            a = open_.pop(rng.randrange(len(open_)))
            out.append(a.model_copy(update={"state": AlertState.RESOLVED, "ended_at": t, "ts": t}))
            continue
        tier = rng.choices(["attention", "critical", "info"], [7, 2, 1])[0]
        node, gpu = rng.randrange(64), rng.randrange(8)
        a = AlertTransition(
            fingerprint=f"{len(out):08x}", rule=rng.choice(["mem_leak", "thermal", "xid_48", "step_slow"]),
            tier=tier, state="firing", started_at=t, ts=t, summary="bench",
            labels={"node": f"node-{node:02d}", "gpu": str(gpu), "user": f"u{rng.randrange(40)}",
                    "project": f"p{rng.randrange(10)}", "task": f"task-{rng.randrange(30)}"})
        open_.append(a)
        out.append(a)
    return out


def run(transitions: list[AlertTransition], control: ControlState, extra: list[AlertTransition]) -> tuple[float, int]:
    r = Router(config(), control)
    for a in extra:
        r.on_transition(a, a.ts)
    sent = 0
    next_tick = T0
    start = time.perf_counter()
    for a in transitions:
        sent += len(r.on_transition(a, a.ts))
        while next_tick <= a.ts:
            sent += len(r.tick(next_tick))
            next_tick += 1.0
    return time.perf_counter() - start, sent


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    work = workload(n)
    silences = ControlState()
    for i in range(200):
        silences.apply(Silence(id=f"s{i}", matchers=[parse_matcher(f"node=other-{i}")], starts_at=T0,
                               ends_at=T0 + 10 * 86400, created_by="bench"))
    lost = [AlertTransition(fingerprint="lost", rule="gpu_lost", tier="critical", state="firing", started_at=T0,
                            ts=T0, summary="gpu lost", labels={"node": "node-00", "gpu": "0"})]
    variants = [("default policy", ControlState(), []), ("200 silences", silences, []),
                ("+ lost GPU inhibiting node-00", ControlState(), lost)]
    print(f"router: {n} transitions, {int(work[-1].ts - T0)} s of event time, ticks every 1 s")
    base = None
    for name, control, extra in variants:
        secs, sent = run(work, control, extra)
        rate = n / secs
        base = base or rate
        print(f"{name:<32} {rate:>10,.0f} decisions/s  {secs:6.2f} s  {sent:>7} notifications  "
              f"ratio {rate / base:4.2f}")


if __name__ == "__main__":
    main()
