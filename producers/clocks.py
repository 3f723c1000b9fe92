"""Clock-event (throttle) reason bits, as NVML reports them, and their names."""

from __future__ import annotations

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

_NAMES = (
    (IDLE, "gpu_idle"),
    (APP_CLOCKS, "applications_clocks_setting"),
    (SW_POWER_CAP, "sw_power_cap"),
    (HW_SLOWDOWN, "hw_slowdown"),
    (SYNC_BOOST, "sync_boost"),
    (SW_THERMAL, "sw_thermal_slowdown"),
    (HW_THERMAL, "hw_thermal_slowdown"),
    (HW_POWER_BRAKE, "hw_power_brake_slowdown"),
    (DISPLAY_CLOCKS, "display_clock_setting"),
)


def reason_names(mask: int) -> list[str]:
    """Decoded names of the set bits, in bit order; unknown bits as ``0x…``."""
    names = [name for bit, name in _NAMES if mask & bit]
    known = sum(bit for bit, _ in _NAMES)
    if mask & ~known:
        names.append(f"0x{mask & ~known:x}")
    return names
