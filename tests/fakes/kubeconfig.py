"""A kubeconfig for the official client pointing at a loopback API server of a test's own."""

from __future__ import annotations

import json
from pathlib import Path


def loopback_kubeconfig(path: Path, port: int) -> Path:
    """Write a kubeconfig for ``http://127.0.0.1:port`` with a bearer token; ``path``."""
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "loop",
        "clusters": [{"name": "loop", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "not-a-secret"}}],
        "contexts": [{"name": "loop", "context": {"cluster": "loop", "user": "u"}}]}))
    return path
