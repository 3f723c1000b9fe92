"""Static facts of the GPU models the simulator and the fake NVML imitate.

Figures are the public board limits (SXM parts) and, for the H200, what NVML
reported on the measured board (see shared reference nvml-costs-h200.md).
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class GpuModel:
    name: str
    mem_total_mib: int
    power_limit_w: float
    idle_power_w: float
    sm_max_mhz: int
    sm_idle_mhz: int
    mem_clock_mhz: int
    pcie_gen: int
    nvlinks: int
    gpm: bool
    """GPM (SM active/occupancy, tensor, DRAM activity) exists from Hopper on."""


MODELS: dict[str, GpuModel] = {
    "H200": GpuModel("NVIDIA H200", 143771, 700.0, 83.0, 1980, 345, 3201, 5, 18, True),
    "H100": GpuModel("NVIDIA H100 80GB HBM3", 81559, 700.0, 72.0, 1980, 345, 2619, 5, 18, True),
    "A100": GpuModel("NVIDIA A100-SXM4-80GB", 81920, 400.0, 58.0, 1410, 210, 1593, 4, 12, False),
}

#: PCI bus ids of an HGX 8-GPU baseboard, reused for simulated nodes.
HGX_BUS_IDS = ("0000:18:00.0", "0000:2A:00.0", "0000:3A:00.0", "0000:5D:00.0",
               "0000:9A:00.0", "0000:AB:00.0", "0000:BA:00.0", "0000:DB:00.0")


def bus_id(index: int) -> str:
    if index < len(HGX_BUS_IDS):
        return HGX_BUS_IDS[index]
    return f"0000:{0xC0 + index:02X}:00.0"


def model(name: str) -> GpuModel:
    try:
        return MODELS[name.upper()]
    except KeyError:
        raise ValueError(f"unknown GPU model {name!r}; expected one of {', '.join(MODELS)}") from None
