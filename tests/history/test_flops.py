"""FLOPs per token by what the task does, and the peaks of each NVML name, worked by hand."""

from __future__ import annotations

import pytest

from gpuwarden.contract import ModelMode
from gpuwarden.history.flops import flops_per_token, peak_tflops


def test_training_is_three_forward_passes_serving_one() -> None:
    """13e9 parameters, 40 layers, hidden 5,120, context 4,096. Training: 6 × 13e9 = 7.8e10 plus
    12 × 40 × 5,120 × 4,096 = 1.00663296e10. Serving: 2 × 13e9 = 2.6e10 plus 4 × 40 × 5,120 ×
    4,096 = 3.3554432e9."""
    shape = {"layers": 40, "hidden": 5120, "seq_len": 4096}
    assert flops_per_token(13e9, **shape) == 7.8e10 + 1.00663296e10
    assert flops_per_token(13e9, **shape, mode=ModelMode.TRAIN) == 8.80663296e10
    assert flops_per_token(13e9, **shape, mode=ModelMode.SERVE) == 2.6e10 + 3.3554432e9
    assert flops_per_token(13e9, mode=ModelMode.SERVE) == 2.6e10  # no shape: no attention term
    assert flops_per_token(13e9) == 7.8e10


@pytest.mark.parametrize("name, tflops", [
    ("NVIDIA H100 80GB HBM3", 989.0),
    ("NVIDIA H100 PCIe", 756.0),
    ("NVIDIA H100 NVL", 835.0),
    ("NVIDIA H200", 989.0),
    ("NVIDIA H200 NVL", 835.0),  # the SXM part's 989 before
    ("NVIDIA H800", 989.0),
    ("NVIDIA H800 PCIe", 756.0),
    ("NVIDIA H20", 148.0),
    ("NVIDIA A100-SXM4-80GB", 312.0),
    ("NVIDIA A100-PCIE-40GB", 312.0),
    ("NVIDIA A100 80GB PCIe", 312.0),
    ("NVIDIA A800-SXM4-80GB", 312.0),
    ("NVIDIA B200", 2250.0),
    ("NVIDIA L40S", 362.0),
    ("NVIDIA L4", 121.0),
    ("NVIDIA GeForce RTX 4090", None),
    (None, None),
])
def test_each_variant_has_its_own_dense_bf16_peak(name, tflops) -> None:
    assert peak_tflops(name) == tflops
