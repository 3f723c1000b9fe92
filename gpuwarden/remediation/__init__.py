"""Remediation: take a failing node out of its scheduler from the alert, and put it back.

A room of its own (``gpuwarden.remediation``; it sits under ``gpuwarden/`` only so the
editable install finds it without a reinstall, and pyproject.toml maps it as a room):
it imports the foundation only. One small interface per scheduler
(:class:`~gpuwarden.remediation.backends.Backend`: Slurm, Kubernetes, an operator's
command), and :class:`~gpuwarden.remediation.act.Remediator`, which decides what an alert
offers, acts only when a person confirmed (or an operator's ``auto:`` policy names the
rule), never on simulated alerts, idempotently, and writes an audit record for every
attempt. The composition root wires it to the CLI (``gpuwarden act``), the console and
``gpuwarden run``. docs/remediation.md is the operator's guide.
"""
