"""Effective compute: model FLOPs per token and the GPUs' peak, for MFU and cost per token.

MFU (model-FLOPs utilization) is the FLOPs the model's tokens needed over what the GPUs could do
in the same time, rather than "utilization looks high". FLOPs per trained token: 6N for a model of
N parameters (forward and backward passes, Kaplan et al. 2020), plus the attention term 12·L·d·T
when the shape is known (L layers, hidden size d, sequence length T; PaLM, Chowdhery et al. 2022,
appendix B). Peaks are dense BF16 tensor throughput from the vendors' data sheets; a GPU model not
in the table gives None ("unknown"), never a guess.
"""

from __future__ import annotations

#: Dense BF16 TFLOPS (no sparsity), matched against the NVML name, most specific first.
PEAK_BF16_TFLOPS: tuple[tuple[str, float], ...] = (
    ("H100 PCIE", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.0),  # SXM
    ("H200", 989.0),
    ("H20", 148.0),
    ("B200", 2250.0),
    ("A100", 312.0),
    ("A800", 312.0),
    ("L40S", 362.0),
    ("L4", 121.0),
)
PRECISION = "dense BF16"


def peak_tflops(gpu_name: str | None) -> float | None:
    """The table's peak for an NVML GPU name (``NVIDIA H100 80GB HBM3``), or None when unknown.
    A pattern matches when each of its words is a word of the name (``A100-SXM4-80GB`` splits)."""
    words = set((gpu_name or "").upper().replace("-", " ").split())
    for pattern, tflops in PEAK_BF16_TFLOPS:
        if words.issuperset(pattern.split()):
            return tflops
    return None


def flops_per_token(params: float, layers: int | None = None, hidden: int | None = None,
                    seq_len: int | None = None) -> float:
    """Training FLOPs per token: 6N, plus 12·L·d·T when layers, hidden size and sequence length are known."""
    attention = 12.0 * layers * hidden * seq_len if layers and hidden and seq_len else 0.0
    return 6.0 * params + attention
