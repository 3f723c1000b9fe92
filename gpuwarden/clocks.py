"""NVML's clock-event (throttle) reason bits and their names: one table for the agent and the engine.

The agent reports a GPU's reasons as NVML's bitmask (``clock_event_reasons``) with the names of
its set bits (``clock_event_names``); the engine reads the bits into window columns
(``gpuwarden.streams.columns``). The bits are ``nvmlClocksEventReason*`` of nvml.h.
"""

from __future__ import annotations

from typing import NamedTuple

IDLE = 0x1
APP_CLOCKS = 0x2
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SYNC_BOOST = 0x10
SW_THERMAL = 0x20
HW_THERMAL = 0x40
HW_POWER_BRAKE = 0x80
DISPLAY_CLOCKS = 0x100

#: Reasons that mean the hardware itself slowed the GPU (gpud's "hw" set).
HW_REASONS = HW_SLOWDOWN | HW_THERMAL | HW_POWER_BRAKE


class ClockReason(NamedTuple):
    bit: int
    name: str  # as ``clock_event_names`` carries it


#: Every reason NVML names, in bit order.
REASONS = (
    ClockReason(IDLE, "gpu_idle"),
    ClockReason(APP_CLOCKS, "applications_clocks_setting"),
    ClockReason(SW_POWER_CAP, "sw_power_cap"),
    ClockReason(HW_SLOWDOWN, "hw_slowdown"),
    ClockReason(SYNC_BOOST, "sync_boost"),
    ClockReason(SW_THERMAL, "sw_thermal_slowdown"),
    ClockReason(HW_THERMAL, "hw_thermal_slowdown"),
    ClockReason(HW_POWER_BRAKE, "hw_power_brake_slowdown"),
    ClockReason(DISPLAY_CLOCKS, "display_clock_setting"),
)
_KNOWN = sum(r.bit for r in REASONS)


def reason_names(mask: int) -> list[str]:
    """Decoded names of the set bits, in bit order; unknown bits as ``0x…``."""
    names = [r.name for r in REASONS if mask & r.bit]
    if mask & ~_KNOWN:
        names.append(f"0x{mask & ~_KNOWN:x}")
    return names
