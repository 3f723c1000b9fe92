"""systemd's watchdog, fed from the process's own ``/-/healthy`` and ``/-/ready``.

A unit with ``WatchdogSec=`` (deploy/systemd) sets ``WATCHDOG_USEC`` and ``NOTIFY_SOCKET``; then
a daemon thread asks the metrics server (:mod:`gpuwarden.exposition`) for ``/-/healthy`` every
half period and sends ``WATCHDOG=1`` only when it answers 200, so a process whose HTTP server no
longer answers is restarted by systemd. ``/-/ready``'s answer goes in ``STATUS=`` (what
``systemctl status`` shows): a worker that is alive but not doing its job says why, without being
restarted in a loop (a broker outage is not cured by a restart). No dependency: the protocol is
one datagram on a Unix socket (sd_notify(3)).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import urllib.error
import urllib.request

log = logging.getLogger("gpuwarden")


def notify(message: str, path: str | None = None) -> bool:
    """Send ``message`` to systemd's notification socket; False when there is none."""
    path = path or os.environ.get("NOTIFY_SOCKET")
    if not path:
        return False
    if path.startswith("@"):  # an abstract socket
        path = "\0" + path[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        try:
            s.sendto(message.encode(), path)
        except OSError as e:
            log.debug("sd_notify %s: %s", path, e)
            return False
    return True


def period_s() -> float | None:
    """The watchdog period for this process (``WATCHDOG_USEC``, when ``WATCHDOG_PID`` is unset or ours)."""
    usec, pid = os.environ.get("WATCHDOG_USEC"), os.environ.get("WATCHDOG_PID")
    if not usec or not os.environ.get("NOTIFY_SOCKET") or (pid and pid != str(os.getpid())):
        return None
    try:
        return int(usec) / 1e6
    except ValueError:
        return None


def _get(url: str, timeout: float) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - our own loopback server
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")
    except OSError as e:
        return 0, str(e)


def start(host: str, port: int, stop: threading.Event) -> threading.Thread | None:
    """Feed the watchdog from ``http://host:port`` until ``stop``; None when systemd set none."""
    period = period_s()
    if period is None:
        return None
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    base = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    every = max(period / 2, 0.05)

    def run() -> None:
        notify("READY=1")
        while not stop.is_set():
            alive, _ = _get(base + "/-/healthy", every)
            code, body = _get(base + "/-/ready", every)
            status = "ready" if code == 200 else body.strip().replace("\n", " ")[:200] or "not ready"
            notify(("WATCHDOG=1\n" if alive == 200 else "") + f"STATUS={status}")
            stop.wait(every)

    thread = threading.Thread(target=run, name="watchdog", daemon=True)
    thread.start()
    log.info("systemd watchdog: /-/healthy every %.1f s", every)
    return thread


def alive_only() -> threading.Thread | None:
    """No metrics port, hence no ``/-/healthy`` to ask: ping while the process runs (rather than be
    restarted every period), and say so in ``STATUS=``; None when systemd set no watchdog."""
    period = period_s()
    if period is None:
        return None
    every = max(period / 2, 0.05)
    log.warning("systemd watchdog without a metrics port: it proves only that the process runs "
                "(set the metrics port for /-/healthy and /-/ready)")

    def run() -> None:
        notify("READY=1")
        while notify("WATCHDOG=1\nSTATUS=no metrics port: health unknown"):  # until the socket is gone
            time.sleep(every)

    thread = threading.Thread(target=run, name="watchdog", daemon=True)
    thread.start()
    return thread
