"""The group's assignment: tasks, not partitions, to workers; balanced per stage group, sticky.

aiokafka's default (round robin over every partition) would split a node's co-partitioned inputs
between workers. This assignor (the group leader runs it, through aiokafka's public
``partition_assignment_strategy``) hands out whole tasks: a task's every input partition goes to
one member. Each group's tasks are spread evenly (the node tasks, which carry the engine's work,
first, so the lighter ones even out the totals), and a task stays with the member that held it
(each member names its tasks in its join metadata), so a rebalance moves only what it must: a
moved task costs its new owner a restore.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment, ConsumerProtocolMemberMetadata

from gpuwarden.streams.task import TaskId

#: The node tasks do the engine's work: when the totals decide who gets one more task, one node
#: task counts as this many of the others.
WEIGHT = {"node": 4}


class TaskAssignor(AbstractPartitionAssignor):
    name = "gpuwarden-tasks"
    version = 1

    def __init__(self, group_inputs: Mapping[str, Iterable[str]]) -> None:
        self.inputs = {g: tuple(ts) for g, ts in group_inputs.items()}
        self.owned: set[TaskId] = set()  # this member's tasks, told to the leader at the next join

    def metadata(self, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:  # type: ignore[override]
        held = json.dumps(sorted(str(t) for t in self.owned)).encode()
        return ConsumerProtocolMemberMetadata(self.version, sorted(topics), held)

    def on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:  # type: ignore[override]
        pass  # the runtime sets ``owned`` once it runs the tasks

    def assign(self, cluster: ClusterMetadata,  # type: ignore[override]
               members: Mapping[str, ConsumerProtocolMemberMetadata]) -> dict[str, ConsumerProtocolMemberAssignment]:
        ids = sorted(members)
        held = {m: _held(members[m].user_data) for m in ids}
        load = dict.fromkeys(ids, 0)
        tasks_of: dict[str, set[TaskId]] = {m: set() for m in ids}
        for group in sorted(self.inputs, key=lambda g: (-WEIGHT.get(g, 1), g)):
            tasks = [TaskId(group, p) for p in _partitions(cluster, self.inputs[group])]
            weight = WEIGHT.get(group, 1)
            base, extra = divmod(len(tasks), len(ids))
            order = sorted(ids, key=lambda m: (load[m], m))
            room = {m: base + (i < extra) for i, m in enumerate(order)}
            left = []
            for t in tasks:
                owner = next((m for m in ids if t in held[m] and room[m] > 0), None)
                if owner is None:
                    left.append(t)
                else:
                    room[owner] -= 1
                    tasks_of[owner].add(t)
            for t in left:
                m = min((m for m in ids if room[m] > 0), key=lambda m: (load[m], m))
                room[m] -= 1
                tasks_of[m].add(t)
            for m in ids:
                load[m] += weight * sum(t.group == group for t in tasks_of[m])
        return {m: ConsumerProtocolMemberAssignment(self.version, self._partitions_of(tasks_of[m]), b"") for m in ids}

    def _partitions_of(self, tasks: Iterable[TaskId]) -> list[tuple[str, list[int]]]:
        by_topic: dict[str, list[int]] = {}
        for t in tasks:
            for topic in self.inputs[t.group]:
                by_topic.setdefault(topic, []).append(t.partition)
        return sorted((topic, sorted(ps)) for topic, ps in by_topic.items())


def _partitions(cluster: ClusterMetadata, topics: tuple[str, ...]) -> list[int]:
    """A group's partition indices: those every input has (the worker checks at start that their
    counts agree; a topic the metadata does not know yet makes none)."""
    counts = [cluster.partitions_for_topic(t) for t in topics]
    if any(c is None for c in counts):
        return []
    return sorted(set.intersection(*(set(c) for c in counts if c is not None)))


def _held(user_data: bytes) -> set[TaskId]:
    try:
        return {TaskId.parse(x) for x in json.loads(user_data or b"[]")}
    except (ValueError, TypeError):
        return set()
