"""Stream workers as real subprocesses (``gpuwarden streams``), cleaned up whatever happens."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from gpuwarden.contract import TaskSummary, decode
from gpuwarden.streams.progress import is_progress
from tests.hang import HANG_S
from tests.kafka_support import REPO_ROOT


def write_config(path: Path, settings: Any) -> Path:
    """The settings as a YAML config file a worker subprocess loads."""
    data = settings.model_dump(mode="json", include={"kafka", "limits", "engine"})
    path.write_text(yaml.safe_dump(data))
    return path


class Worker:
    """A ``gpuwarden streams`` subprocess: this checkout's code, or ``tree``'s (see :func:`checkout`)."""

    def __init__(self, config: Path, worker_id: str, tmp: Path, tree: Path | None = None,
                 verbose: bool = True) -> None:
        self.worker_id = worker_id
        self.log = tmp / f"{worker_id}.log"
        self._out = self.log.open("wb")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if tree is not None:
            env["PYTHONPATH"] = str(tree)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", cli_module(tree), *(["-v"] if verbose else []), "streams", "--config", str(config),
             "--worker-id", worker_id, "--data-dir", str(tmp / worker_id)],
            stdout=self._out, stderr=subprocess.STDOUT, cwd=tree or REPO_ROOT, env=env,
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no shutdown, no final commit, no changelog flush."""
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=300)

    def stop(self) -> None:
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.kill()
        self._out.close()

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def stacks(self, wait_s: float = 2.0) -> str:
        """Every asyncio task's stack, as the worker logs it on SIGUSR1 (mode's Worker)."""
        if not self.alive():
            return "(not running)"
        before = self.log.stat().st_size
        self.proc.send_signal(signal.SIGUSR1)
        time.sleep(wait_s)
        with self.log.open("rb") as f:
            f.seek(before)
            return f.read().decode(errors="replace")


@contextmanager
def workers(config: Path, tmp: Path, *ids: str, tree: Path | None = None) -> Iterator[list[Worker]]:
    started = [Worker(config, i, tmp, tree) for i in ids]
    try:
        yield started
    except BaseException:
        # what the workers did goes into the failure report (pytest shows captured stdout)
        for w in started:
            print(f"--- worker {w.worker_id}: last 80 lines of {w.log} ---\n{w.tail(80)}")
            print(f"--- worker {w.worker_id}: its tasks now ---\n{w.stacks()}")
        raise
    finally:
        for w in started:
            w.stop()


async def group_members(bootstrap: str, group: str) -> int:
    """How many consumers are in ``group`` right now (one mid-join counts)."""
    return (await group_state(bootstrap, group))[1]


async def group_state(bootstrap: str, group: str) -> tuple[str, int]:
    """The group's state (``Stable``, ``PreparingRebalance``, ...) and its member count."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (desc,) = await admin.describe_consumer_groups([group])
    finally:
        await admin.close()
    _err, _group, state, _ptype, _protocol, members = desc.groups[0] if hasattr(desc, "groups") else desc[0]
    return state, len(members)


async def wait_for(predicate: Any, what: str, poll: float = 0.5, bound: float = HANG_S) -> None:
    """Poll an async ``predicate()`` until true; TimeoutError naming ``what`` after ``bound`` s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound
    while not await predicate():
        if loop.time() > deadline:
            raise TimeoutError(f"{what}: not within {bound:.0f} s")
        await asyncio.sleep(poll)


async def read_to_end(bootstrap: str, topic: str, partitions: int,
                      timeout: float = 20.0) -> list[ConsumerRecord]:
    """Every committed record in ``topic`` now (from the beginning up to the last stable offsets):
    what a ``read_committed`` reader such as the notifier gets of the workers' transactions."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                isolation_level="read_committed", fetch_max_wait_ms=50)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)
        out: list[ConsumerRecord] = []
        async with asyncio.timeout(timeout):
            while left := [tp for tp in tps if await consumer.position(tp) < end[tp]]:
                for batch in (await consumer.getmany(*left, timeout_ms=200)).values():
                    out.extend(r for r in batch if r.offset < end[r.topic_partition if hasattr(r, "topic_partition")
                                                             else TopicPartition(r.topic, r.partition)])
        return out
    finally:
        await consumer.stop()


async def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """Each partition of ``topic``'s end offset now (0: it holds no record)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        end = await consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
        return {tp.partition: n for tp, n in end.items()}
    finally:
        await consumer.stop()


async def read_summaries(bootstrap: str, topic: str, partitions: int) -> list[TaskSummary]:
    """The task summaries in ``topic`` now, without stage 1's progress reports between them."""
    return [decode(r.value, TaskSummary) for r in await read_to_end(bootstrap, topic, partitions)
            if not is_progress(r.headers)]


@contextmanager
def checkout(rev: str) -> Iterator[Path | None]:
    """A temporary git worktree of ``rev`` whose packages import from it (the rooms' folders linked
    under ``gpuwarden/`` as the installed namespace has them): the benchmarks run an older
    revision's workers beside this one's. None if git cannot make one (a shallow clone)."""
    with tempfile.TemporaryDirectory(prefix="gw-before-") as d:
        tree = Path(d) / "tree"
        made = subprocess.run(["git", "-C", str(REPO_ROOT), "worktree", "add", "--detach", str(tree), rev],
                              capture_output=True, text=True)
        if made.returncode != 0:
            print(f"  (no 'before' runs: git worktree add {rev}: {made.stderr.strip()})", flush=True)
            yield None
            return
        try:
            for room in ("producers", "streams", "notifiers", "history", "app"):
                if (tree / room).is_dir() and not (tree / "gpuwarden" / room).exists():
                    (tree / "gpuwarden" / room).symlink_to(tree / room, target_is_directory=True)
            yield tree
        finally:
            subprocess.run(["git", "-C", str(REPO_ROOT), "worktree", "remove", "--force", str(tree)],
                           capture_output=True)


def cli_module(tree: Path | None = None) -> str:
    """The CLI's module in this checkout or ``tree`` (before the composition root it was gpuwarden.cli)."""
    return "gpuwarden.app.cli" if (tree or REPO_ROOT).joinpath("app", "cli.py").exists() else "gpuwarden.cli"


def cpu_s(pid: int) -> float:
    """CPU seconds the process has run so far, all its threads (scheduler nanoseconds)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile
    return total / 1e9


def troubles(*logs: Path) -> list[str]:
    """Each traceback or divergence in the workers' logs, as ``name:line:`` with the line before it
    and the eleven after: what a failing assertion prints, short enough to survive a CI excerpt."""
    found = []
    for path in logs:
        lines = path.read_text(errors="replace").splitlines()
        for i, line in enumerate(lines):
            if "Traceback" in line or "DIVERGED" in line:
                found.append(f"{path.name}:{i + 1}: " + " | ".join(x.strip() for x in lines[max(0, i - 1):i + 12]))
    return found
