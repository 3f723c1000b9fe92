"""Hardware events from three places, deduplicated: NVML event sets, the kernel log, counter deltas.

Each source yields :class:`HwEvent` (no node/seq yet); the agent's
:class:`EventLog` dedups them across sources and stamps them into contract
``GpuEvent`` records. The kmsg parser and counter differ are pure functions;
the two watchers are thin threads that never touch the sampling path.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from gpuwarden import clocks
from gpuwarden.contract import EventKind, GpuEvent, GpuSample
from gpuwarden.producers.xid import lookup, lookup_sxid

log = logging.getLogger(__name__)


@dataclass(slots=True)
class HwEvent:
    kind: EventKind
    source: str
    ts: float
    code: int | None = None
    gpu_index: int | None = None
    gpu_uuid: str | None = None
    pci_bus_id: str | None = None
    count: int = 1
    message: str = ""
    recovery_action: str | None = None


# --------------------------------------------------------------------------- XID 154: the GPU's recovery action

XID_RECOVERY = 154
#: ``nvmlDeviceGpuRecoveryAction_t`` (nvml.h) by value, for a binding that lacks the names
#: and for the kernel log's "changed from 0x.. to 0x.." text.
RECOVERY_ACTIONS = {0: "NONE", 1: "GPU_RESET", 2: "NODE_REBOOT", 3: "DRAIN_P2P", 4: "DRAIN_AND_RESET",
                    5: "RECOVER_IMEX_DOMAIN", 6: "BUS_RESET", 7: "SYSTEM_REBOOT"}
_RECOVERY_TO = re.compile(r"\bto (0x[0-9A-Fa-f]+)")


def recovery_action_name(value: int, nvml=None) -> str:
    """The name of a recovery action value: the binding's ``NVML_GPU_RECOVERY_ACTION_*`` where it
    has one, else nvml.h's, else ``UNKNOWN_<n>``."""
    prefix = "NVML_GPU_RECOVERY_ACTION_"
    for name in dir(nvml) if nvml is not None else ():
        if name.startswith(prefix) and getattr(nvml, name) == value:
            return name.removeprefix(prefix)
    return RECOVERY_ACTIONS.get(value, f"UNKNOWN_{value}")


def recovery_from_message(message: str) -> str | None:
    """The action an XID 154 line changed to ("GPU recovery action changed from 0x0 (None) to
    0x1 (Reset Required)"), or None when the line does not say."""
    m = _RECOVERY_TO.search(message)
    return recovery_action_name(int(m.group(1), 16)) if m else None


# --------------------------------------------------------------------------- kernel log

_XID = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\): (\d+),\s*(.*)")
_SXID = re.compile(r"SXid \(PCI:([0-9A-Fa-f:.]+)\): (\d+),\s*(.*)")
_BUS = re.compile(r"\b([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)")
_KMSG_PREFIX = re.compile(r"^\d+,\d+,(\d+),[^;]*;")
_DMESG_PREFIX = re.compile(r"^\[\s*(\d+\.\d+)\]\s*")
# Kernel-module messages that mean the driver cannot drive a GPU (no XID is logged for them).
_DRIVER_ERROR = re.compile(
    r"NVRM:.*(RmInitAdapter failed|rm_init_adapter failed|API mismatch|probe routine failed"
    r"|necessary power cables|PCI I/O region assigned to your NVIDIA device is invalid"
    r"|failed to allocate|GPU is lost)",
    re.IGNORECASE,
)


def normalize_bus_id(pci: str) -> str:
    """``0000:3b:00`` / ``3b:00.0`` → ``0000:3B:00.0`` (NVML's spelling)."""
    pci = pci.upper()
    if pci.count(":") == 1:
        pci = "0000:" + pci
    domain, rest = pci.split(":", 1)
    domain = domain[-4:].rjust(4, "0")
    if "." not in rest:
        rest += ".0"
    return f"{domain}:{rest}"


def parse_kmsg_line(line: str, ts: float) -> HwEvent | None:
    """One kernel log line (``/dev/kmsg`` record or ``dmesg`` line) → an event, or None."""
    text = line.rstrip("\n")
    m = _KMSG_PREFIX.match(text)
    if m:
        text = text[m.end():]
    else:
        text = _DMESG_PREFIX.sub("", text, count=1)
    if m := _XID.search(text):
        code = int(m.group(2))
        return HwEvent(EventKind.XID, "kmsg", ts, code=code, pci_bus_id=normalize_bus_id(m.group(1)),
                       message=text[m.start():][:4096],
                       recovery_action=recovery_from_message(m.group(3)) if code == XID_RECOVERY else None)
    if m := _SXID.search(text):
        return HwEvent(EventKind.SXID, "kmsg", ts, code=int(m.group(2)),
                       pci_bus_id=normalize_bus_id(m.group(1)), message=text[m.start():][:4096])
    if "NVRM" in text and "fallen off the bus" in text.lower():
        m = _BUS.search(text)
        pci = normalize_bus_id(m.group(1)) if m else None
        return HwEvent(EventKind.XID, "kmsg", ts, code=79, pci_bus_id=pci, message=text[:4096])
    if m := _DRIVER_ERROR.search(text):
        bus = _BUS.search(text)
        return HwEvent(EventKind.DRIVER, "kmsg", ts, pci_bus_id=normalize_bus_id(bus.group(1)) if bus else None,
                       message=text[m.start():][:4096])
    return None


class KmsgWatcher:
    """Tails ``/dev/kmsg`` (new records only) in a daemon thread; parsed events go to ``emit``."""

    def __init__(self, emit: Callable[[HwEvent], None], path: str = "/dev/kmsg",
                 clock: Callable[[], float] = time.time) -> None:
        self.emit, self.path, self.clock = emit, path, clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        """False (with a log line saying why) when the log cannot be opened."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as e:
            log.warning("kmsg: unavailable (%s: %s): XIDs come from NVML events only", self.path, e.strerror)
            return False
        try:
            os.lseek(fd, 0, os.SEEK_END)
        except OSError:
            pass
        self._thread = threading.Thread(target=self._run, args=(fd,), name="kmsg", daemon=True)
        self._thread.start()
        return True

    def _run(self, fd: int) -> None:
        import select

        buf = b""
        try:
            while not self._stop.is_set():
                ready, _, _ = select.select([fd], [], [], 0.5)
                if not ready:
                    continue
                try:
                    chunk = os.read(fd, 8192)
                except BlockingIOError:
                    continue
                except OSError as e:  # EPIPE: records overwritten before we read them
                    log.debug("kmsg read: %s", e)
                    continue
                if not chunk:
                    time.sleep(0.5)  # a regular file at EOF
                    continue
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for raw in lines:
                    ev = parse_kmsg_line(raw.decode("utf-8", "replace"), self.clock())
                    if ev is not None:
                        self.emit(ev)
        finally:
            os.close(fd)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)


# --------------------------------------------------------------------------- NVML event sets

EV_SBE, EV_DBE, EV_PSTATE, EV_XID, EV_CLOCK = 0x1, 0x2, 0x4, 0x8, 0x10
EV_RECOVERY = 0x8000  # nvmlEventTypeGpuRecoveryAction: the action changed; read it from field 230
WANTED = EV_SBE | EV_DBE | EV_XID | EV_CLOCK | EV_RECOVERY


def nvml_event(event_type: int, data: int, gpu_index: int, uuid: str | None, ts: float) -> HwEvent | None:
    """Map one NVML event; types we did not ask for and clock events without HW reasons → None."""
    if event_type == EV_XID:
        return HwEvent(EventKind.XID, "nvml", ts, code=int(data), gpu_index=gpu_index, gpu_uuid=uuid,
                       message=f"NVML XID critical error {data}")
    if event_type == EV_RECOVERY:  # the XID 154 the driver also logs; EventLog reads the action
        return HwEvent(EventKind.XID, "nvml", ts, code=XID_RECOVERY, gpu_index=gpu_index, gpu_uuid=uuid,
                       message="NVML GPU recovery action event")
    if event_type == EV_DBE:
        return HwEvent(EventKind.ECC_DBE, "nvml", ts, gpu_index=gpu_index, gpu_uuid=uuid,
                       message="double-bit ECC error (NVML event)")
    if event_type == EV_SBE:
        return HwEvent(EventKind.ECC_SBE, "nvml", ts, gpu_index=gpu_index, gpu_uuid=uuid,
                       message="single-bit ECC error (NVML event)")
    if event_type == EV_CLOCK and data & clocks.HW_REASONS:
        hw = int(data) & clocks.HW_REASONS
        return HwEvent(EventKind.CLOCK_EVENT, "nvml", ts, code=hw, gpu_index=gpu_index, gpu_uuid=uuid,
                       message="clock event: " + ", ".join(clocks.reason_names(hw)))
    return None


class NvmlEventWatcher:
    """Waits on an NVML event set in its own thread, so sampling is never delayed."""

    def __init__(self, nvml, handles: list, uuids: list[str | None], emit: Callable[[HwEvent], None],
                 clock: Callable[[], float] = time.time, wait_ms: int = 500) -> None:
        self.nvml, self.handles, self.uuids, self.emit = nvml, handles, uuids, emit
        self.clock, self.wait_ms = clock, wait_ms
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._index: dict[int, int] = {}

    def start(self) -> bool:
        nv = self.nvml
        try:
            self._set = nv.nvmlEventSetCreate()
        except nv.NVMLError as e:
            log.warning("NVML event sets unavailable (%s): XIDs come from the kernel log only", e)
            return False
        registered = 0
        for i, h in enumerate(self.handles):
            try:
                supported = nv.nvmlDeviceGetSupportedEventTypes(h)
                nv.nvmlDeviceRegisterEvents(h, WANTED & supported, self._set)
                registered += 1
            except nv.NVMLError as e:
                log.warning("GPU %d: cannot register NVML events (%s)", i, e)
        if not registered:
            return False
        self._thread = threading.Thread(target=self._run, name="nvml-events", daemon=True)
        self._thread.start()
        return True

    def _device_index(self, device) -> int | None:
        for i, h in enumerate(self.handles):
            if h == device or getattr(h, "value", h) == getattr(device, "value", device):
                return i
        return None

    def _run(self) -> None:
        nv = self.nvml
        wait = getattr(nv, "nvmlEventSetWait_v2", None) or nv.nvmlEventSetWait
        while not self._stop.is_set():
            try:
                data = wait(self._set, self.wait_ms)
            except nv.NVMLError as e:
                if isinstance(e, getattr(nv, "NVMLError_Timeout", ())):
                    continue
                log.warning("NVML event wait failed (%s); retrying in 1 s", e)
                self._stop.wait(1.0)
                continue
            idx = self._device_index(data.device)
            ev = nvml_event(int(data.eventType), int(data.eventData), idx if idx is not None else 0,
                            self.uuids[idx] if idx is not None else None, self.clock())
            if ev is not None:
                self.emit(ev)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        try:
            self.nvml.nvmlEventSetFree(self._set)
        except Exception:  # noqa: BLE001 - best effort at shutdown
            pass


# --------------------------------------------------------------------------- counter deltas


def counter_events(prev: GpuSample, cur: GpuSample, ts: float) -> list[HwEvent]:
    """Events implied by counters that rose between two samples of the same GPU."""
    out: list[HwEvent] = []

    def rise(field: str) -> int:
        a, b = getattr(prev, field), getattr(cur, field)
        return b - a if a is not None and b is not None and b > a else 0

    def add(kind: EventKind, count: int, message: str) -> None:
        out.append(HwEvent(kind, "counter", ts, gpu_index=cur.index, gpu_uuid=cur.uuid,
                           count=max(1, count), message=message))

    if n := rise("ecc_volatile_uncorrected"):
        add(EventKind.ECC_DBE, n, f"uncorrected ECC errors +{n}")
    if n := rise("ecc_volatile_corrected"):
        add(EventKind.ECC_SBE, n, f"corrected ECC errors +{n}")
    rows = rise("remapped_rows_corrected") + rise("remapped_rows_uncorrected")
    if (cur.remap_pending and prev.remap_pending is False) or rows:
        add(EventKind.ROW_REMAP, rows, f"remapped rows +{rows}, pending={cur.remap_pending}")
    if cur.remap_failure and prev.remap_failure is False:
        add(EventKind.ROW_REMAP, 1, "row remapping failed (RMA candidate)")
    if n := rise("pcie_replay_counter"):
        add(EventKind.PCIE_REPLAY, n, f"PCIe replays +{n}")
    return out


# --------------------------------------------------------------------------- dedup + stamping


class EventLog:
    """Dedups events across sources and stamps them as contract records.

    The same (kind, GPU, code) seen again within ``window_s`` — e.g. XID 79 from
    both NVML and kmsg, or a DBE from an NVML event and the counter — is
    dropped; the first report wins. Thread-safe: watchers call :meth:`add`.
    """

    def __init__(self, node: str, boot_id: str, bus_ids: dict[str, int] | None = None,
                 window_s: float = 10.0, recovery_reader: Callable[[int], str | None] | None = None) -> None:
        self.node, self.boot_id, self.window_s = node, boot_id, window_s
        self.bus_ids = bus_ids or {}
        self.recovery_reader = recovery_reader
        """GPU index → its recovery action now (the NVML collector's field read), for XID 154."""
        self.seq = 0
        self._seen: dict[tuple, float] = {}
        self._pending: list[GpuEvent] = []
        self._lock = threading.Lock()

    def add(self, ev: HwEvent) -> GpuEvent | None:
        if ev.gpu_index is None and ev.pci_bus_id is not None:
            ev.gpu_index = self.bus_ids.get(ev.pci_bus_id)
        gpu = ev.gpu_index if ev.gpu_index is not None else ev.pci_bus_id
        key = (ev.kind, gpu, ev.code)
        recovery = ev.recovery_action
        if ev.kind == EventKind.XID and ev.code == XID_RECOVERY and ev.gpu_index is not None and self.recovery_reader:
            recovery = self.recovery_reader(ev.gpu_index) or recovery  # NVML's answer now, else the log's text
        with self._lock:
            last = self._seen.get(key)
            if last is not None and abs(ev.ts - last) < self.window_s:
                return None
            self._seen[key] = ev.ts
            if len(self._seen) > 4096:
                horizon = ev.ts - self.window_s
                self._seen = {k: t for k, t in self._seen.items() if t >= horizon}
            catalogue = None
            if ev.kind == EventKind.XID and ev.code is not None:
                catalogue = lookup(ev.code)
                if ev.code == XID_RECOVERY and recovery:  # the catalogue's XID_154: "read the action"
                    catalogue = catalogue.model_copy(update={"action": recovery})
            elif ev.kind == EventKind.SXID and ev.code is not None:
                catalogue = lookup_sxid(ev.code)
            rec = GpuEvent(ts=ev.ts, node=self.node, seq=self.seq, boot_id=self.boot_id, kind=ev.kind,
                           source=ev.source, gpu_index=ev.gpu_index, gpu_uuid=ev.gpu_uuid,
                           pci_bus_id=ev.pci_bus_id, code=ev.code, count=ev.count,
                           message=ev.message, catalogue=catalogue, recovery_action=recovery)
            self.seq += 1
            self._pending.append(rec)
            return rec

    def drain(self) -> list[GpuEvent]:
        with self._lock:
            out, self._pending = self._pending, []
        return out
