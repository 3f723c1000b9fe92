"""The scheduler rules' English text, in one place: the stages fill it; the notifiers' zh-CN
catalogue (``notifiers/default_rules.zh-CN.yaml``) keys its translations by these templates, as
it does the rule pack's (``tests/acceptance/test_language.py`` checks both). A resolve is filled
with the figures at resolution (as the rule pack's, #18 defect 4), in ``RESOLVED``'s words where
the firing's would no longer be true."""

from __future__ import annotations

#: Rule name -> (summary, action) templates; names from the alert's labels and evidence values.
TEXT: dict[str, tuple[str, str]] = {
    "scheduler-fragmentation": (
        "job {job} ({user}, {queue}) needs {gpus:.0f} GPUs on one node: {free:.0f} are free in total but no "
        "node has {gpus:.0f}",
        "Drain or pack a node (the evidence names each node's free GPUs), or let the job span nodes."),
    "scheduler-requeued": (
        "job {job} ({user}) was preempted or requeued {requeues:.0f} times",
        "Nothing yet: it is recorded; attention from {attention:.0f} requeues (it would keep losing its work)."),
    "scheduler-requeued-repeatedly": (
        "job {job} ({user}) was preempted or requeued {requeues:.0f} times: it loses its work each time",
        "Check preemption priorities and the job's checkpointing, or move it to a partition that does not "
        "preempt."),
    "scheduler-wait-above-baseline": (
        "{queue} jobs asking for {gpus} GPUs wait {wait} (median of {pending:.0f} pending) against a "
        "usual {baseline}",
        "See what holds the queue (pending reasons, fragmentation, a user's burst); add capacity or rebalance "
        "partitions."),
    "scheduler-success-rate-drop": (
        "{queue} jobs asking for {gpus} GPUs: {rate:.0%} of the last {jobs:.0f} ended well, against "
        "{baseline_rate:.0%} before",
        "Look at the failed jobs' exit codes and nodes (a bad node, a broken image, a full disk)."),
    "job-gpus-unused": (
        "job {job} ({user}) holds {allocated:.0f} GPUs on {node} but uses {busy:.0f}",
        "Ask for {busy:.0f} GPUs next time (or fix the job's device placement); the idle ones block other "
        "users' jobs."),
}

#: Rule name -> the summary template of its resolve (the others resolve in their firing's words).
RESOLVED: dict[str, str] = {
    "scheduler-fragmentation":
        "job {job} ({user}, {queue}) is no longer held by fragmentation: {free:.0f} GPUs free in its partition, "
        "at most {most:.0f} on one node",
    "scheduler-wait-above-baseline":
        "{queue} jobs asking for {gpus} GPUs: wait back to {wait} (median of {pending:.0f} pending) against a "
        "usual {baseline}",
    "scheduler-success-rate-drop":
        "{queue} jobs asking for {gpus} GPUs: {rate:.0%} of the last {jobs:.0f} ended well again, against "
        "{baseline_rate:.0%} before",
    "job-gpus-unused": "job {job} ({user}) holds {allocated:.0f} GPUs on {node} and uses {busy:.0f} of them now",
}
