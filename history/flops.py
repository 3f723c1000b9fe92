"""Effective compute: model FLOPs per token and the GPUs' peak, for MFU and cost per token.

MFU (model-FLOPs utilization) is the FLOPs the model's tokens needed over what the GPUs could do
in the same time, rather than "utilization looks high". FLOPs per token follow what the task does
with its model. A forward pass costs 2N for N parameters (a multiply and an add per parameter,
Kaplan et al. 2020, table 1); training adds the backward pass, twice the forward: 6N. Attention
over a context of T tokens adds 4·L·d·T per token to a forward pass (QKᵀ and the weighted sum of
the values, 2·T·d each in each of L layers of hidden size d), so 12·L·d·T to training (PaLM,
Chowdhery et al. 2022, appendix B, whose 6N + 12·L·H·Q·T this is, with H·Q = d); each is added
when the shape is known. For serving, T is the context the task declares, an upper bound while a
reply is decoded.

Peaks are dense BF16 tensor throughput (no 2:4 sparsity) from NVIDIA's data sheets, which give
the sparse figure with a footnote: the dense one is half of it. A GPU model not in the table gives
None ("unknown"), never a guess.
"""

from __future__ import annotations

from gpuwarden.contract import ModelMode

#: Dense BF16 TFLOPS per GPU, matched against the NVML name, most specific first. Sources (sparse
#: figure halved): H100 and H800 data sheets (SXM 1,979, NVL 1,671, PCIe 1,513); H200 data sheet
#: (SXM 1,979, NVL 1,671); A100 and A800 data sheets (312 dense for PCIe and SXM alike); H20 product
#: brief (148 dense); HGX B200 data sheet (36 PFLOPS for 8 GPUs, 4.5 each); L40S (733) and L4 (242)
#: data sheets. docs/accounting.md lists them with the NVML names they match.
PEAK_BF16_TFLOPS: tuple[tuple[str, float], ...] = (
    ("H100 PCIE", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.0),  # SXM
    ("H800 PCIE", 756.0),
    ("H800", 989.0),  # SXM
    ("H200 NVL", 835.0),
    ("H200", 989.0),  # SXM
    ("H20", 148.0),
    ("B200", 2250.0),
    ("A100 PCIE", 312.0),
    ("A100", 312.0),  # SXM
    ("A800 PCIE", 312.0),
    ("A800", 312.0),  # SXM
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
                    seq_len: int | None = None, mode: ModelMode = ModelMode.TRAIN) -> float:
    """FLOPs per token: training 6N + 12·L·d·T, serving 2N + 4·L·d·T (the attention term when
    layers, hidden size and sequence length are known)."""
    passes = 3.0 if mode == ModelMode.TRAIN else 1.0  # forward, plus a backward of twice its cost
    attention = 4.0 * layers * hidden * seq_len if layers and hidden and seq_len else 0.0
    return passes * (2.0 * params + attention)
