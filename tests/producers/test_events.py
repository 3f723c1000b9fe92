"""Kernel-log parsing on real XID line formats, NVML event mapping, counter deltas, dedup."""

from __future__ import annotations

import os
import time
from pathlib import Path

from gpuwarden.contract import EventKind, GpuSample, decode, encode
from gpuwarden.producers.events import (EV_CLOCK, EV_PSTATE, EV_XID, EventLog, HwEvent, KmsgWatcher,
                              counter_events, nvml_event, parse_kmsg_line)

FIXTURE = Path(__file__).parent.parent / "fixtures" / "kmsg" / "xid-lines.txt"


def parsed():
    return [parse_kmsg_line(line, 100.0) for line in FIXTURE.read_text().splitlines()]


def test_kmsg_lines_parse_to_codes_and_bus_ids():
    got = [(e.kind, e.code, e.pci_bus_id) if e else None for e in parsed()]
    assert got == [
        (EventKind.XID, 79, "0000:3B:00.0"),
        None,
        None,
        (EventKind.XID, 48, "0000:CA:00.0"),
        (EventKind.XID, 63, "0000:CA:00.0"),
        (EventKind.XID, 13, "0000:0B:00.0"),
        (EventKind.XID, 94, "0000:B1:00.0"),
        (EventKind.XID, 119, "0000:18:00.0"),
        (EventKind.SXID, 12028, "0000:86:00.0"),
        (EventKind.XID, 79, "0000:5D:00.0"),
        None,
        (EventKind.XID, 999, "0000:DB:00.0"),
    ]
    first = parsed()[0]
    assert first.message.startswith("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234")
    assert first.source == "kmsg"


def test_event_log_attaches_catalogue_maps_bus_ids_and_stamps_seq():
    log = EventLog("node-07", "boot-1", bus_ids={"0000:3B:00.0": 2, "0000:CA:00.0": 5})
    recs = [r for e in parsed() if e and (r := log.add(e))]
    assert [r.seq for r in recs] == list(range(len(recs)))
    by_code = {}
    for r in recs:
        by_code.setdefault(r.code, r)
    assert by_code[79].gpu_index == 2 and by_code[79].catalogue.action == "RESTART_BM"
    assert by_code[48].gpu_index == 5 and by_code[48].catalogue.severity == "fatal"
    assert by_code[999].catalogue.severity == "warning"  # unknown code: generic entry
    assert by_code[12028].kind == EventKind.SXID and by_code[12028].catalogue is not None
    for r in recs:
        assert decode(encode(r)) == r
    assert log.drain() == recs and log.drain() == []


def test_same_xid_from_nvml_and_kmsg_is_reported_once_within_window():
    log = EventLog("n", "b", bus_ids={"0000:3B:00.0": 2})
    nv = nvml_event(EV_XID, 79, 2, "GPU-x", 100.0)
    km = parse_kmsg_line(FIXTURE.read_text().splitlines()[0], 101.5)
    assert log.add(nv) is not None
    assert log.add(km) is None
    later = parse_kmsg_line(FIXTURE.read_text().splitlines()[0], 200.0)
    assert log.add(later) is not None  # a repeat after the window is a new event


def test_nvml_events_filtered_by_type():
    assert nvml_event(EV_PSTATE, 0, 0, None, 1.0) is None
    assert nvml_event(EV_CLOCK, 0x4, 0, None, 1.0) is None  # SW power cap: not a hardware event
    ev = nvml_event(EV_CLOCK, 0x40 | 0x4, 1, "GPU-a", 1.0)
    assert ev.kind == EventKind.CLOCK_EVENT and ev.code == 0x40 and "hw_thermal_slowdown" in ev.message


def test_counter_deltas_become_events():
    a = GpuSample(index=0, uuid="GPU-a", ecc_volatile_corrected=3, ecc_volatile_uncorrected=0,
                  remapped_rows_corrected=0, remap_pending=False, pcie_replay_counter=10)
    b = a.model_copy(update=dict(ecc_volatile_corrected=7, ecc_volatile_uncorrected=1,
                                 remapped_rows_corrected=1, remap_pending=True, pcie_replay_counter=12))
    evs = {e.kind: e for e in counter_events(a, b, 5.0)}
    assert evs[EventKind.ECC_SBE].count == 4
    assert evs[EventKind.ECC_DBE].count == 1
    assert evs[EventKind.ROW_REMAP].count == 1
    assert evs[EventKind.PCIE_REPLAY].count == 2
    assert counter_events(b, b, 6.0) == []
    unsupported = GpuSample(index=0, uuid="GPU-a")
    assert counter_events(unsupported, b, 6.0) == []  # null counters never fake a delta


def test_kmsg_watcher_reads_only_new_lines(tmp_path):
    log_file = tmp_path / "kmsg"
    log_file.write_text(FIXTURE.read_text())  # old lines: must not be reported
    got: list[HwEvent] = []
    w = KmsgWatcher(got.append, path=str(log_file))
    assert w.start()
    try:
        with open(log_file, "a") as f:
            f.write("4,3000,1,-;NVRM: Xid (PCI:0000:18:00): 31, pid=9, name=x, MMU Fault\n")
        deadline = time.monotonic() + 120  # a wait on the line's arrival; the bound only catches a hang (#33)
        while not got and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        w.stop()
    assert [(e.code, e.pci_bus_id) for e in got] == [(31, "0000:18:00.0")]


def test_kmsg_watcher_missing_log_reports_false(tmp_path):
    assert KmsgWatcher(lambda e: None, path=str(tmp_path / "absent")).start() is False
    assert not os.path.exists(tmp_path / "absent")


def test_driver_error_lines_become_driver_events():
    lines = (FIXTURE.parent / "driver-lines.txt").read_text().splitlines()
    got = [parse_kmsg_line(line, 100.0) for line in lines]
    assert [(e.kind, e.pci_bus_id) if e else None for e in got] == [
        (EventKind.DRIVER, "0000:9A:00.0"),
        (EventKind.DRIVER, "0000:9A:00.0"),
        (EventKind.DRIVER, None),
        (EventKind.DRIVER, None),
        None,                                   # the module loading normally is not an error
    ]
    assert got[0].message == "NVRM: GPU 0000:9a:00.0: RmInitAdapter failed! (0x26:0x65:1457)"
    assert got[2].message.startswith("NVRM: API mismatch: the client has the version 550.54.15")
    log = EventLog("node-07", "boot-1", bus_ids={"0000:9A:00.0": 4})
    rec = log.add(got[0])
    assert rec.kind == EventKind.DRIVER and rec.gpu_index == 4 and rec.code is None
