"""Model FLOPs for throughput and MFU figures.

Counted analytically, the usual convention for MFU: training costs 3x the
forward matmuls (forward, and backward for activations and weights).
"""
from __future__ import annotations

from bert_jax.model.config import BertConfig

# Dense bf16 peak FLOP/s per device, by jax's device_kind, for the MFU estimate.
PEAK_FLOPS_PER_DEVICE = {
    "NVIDIA H100 80GB HBM3": 989e12,
    "NVIDIA H100": 989e12,
    "NVIDIA H200": 989e12,
    "NVIDIA A100-SXM4-80GB": 312e12,
    "NVIDIA A100-SXM4-40GB": 312e12,
    "NVIDIA A100 80GB PCIe": 312e12,
    "TPU v4": 275e12,
    "TPU v5 lite": 197e12,
    "TPU v5e": 197e12,
    "TPU v5p": 459e12,
    "TPU v6 lite": 918e12,
}


def train_flops_per_sequence(config: BertConfig, seq_length: int, num_predictions: int) -> float:
    """Training FLOPs of BertForPreTraining for one sequence.

    Per layer: the Q/K/V/output projections (4 h^2) and the feed-forward
    (2 h i) on every token, plus attention scores and context (2 s^2 h);
    then the MLM head on the gathered positions and the pooler + NSP.
    """
    h, i, v = config.hidden_size, config.intermediate_size, config.vocab_size
    s, p = seq_length, num_predictions
    per_layer = 2 * s * (4 * h * h + 2 * h * i) + 2 * 2 * s * s * h
    mlm = 2 * p * (h * h + h * v)
    pooler_nsp = 2 * (h * h + 2 * h)
    return 3.0 * (config.num_hidden_layers * per_layer + mlm + pooler_nsp)


def encoder_train_flops_per_sequence(config: BertConfig, seq_length: float) -> float:
    """Training FLOPs of the encoder and pooler for one sequence (fine-tuning; heads are tiny)."""
    h, i, s = config.hidden_size, config.intermediate_size, seq_length
    per_layer = 2 * s * (4 * h * h + 2 * h * i) + 2 * 2 * s * s * h
    return 3.0 * (config.num_hidden_layers * per_layer + 2 * h * h)


def peak_flops_per_device(device_kind: str) -> float | None:
    """The device's dense bf16 peak, or None when unknown (e.g. CPUs)."""
    for kind, flops in PEAK_FLOPS_PER_DEVICE.items():
        if device_kind.startswith(kind):
            return flops
    return None


def measure_matmul_flops_per_s(n: int = 2048, repeats: int = 10) -> float:
    """FLOP/s of a jitted fp32 [n, n] x [n, n] matmul on the default device (best of repeats).

    The practical ceiling of a machine whose peak we do not know (CPUs); model
    throughput over it is the MFU-like figure the benchmarks report.
    """
    import time

    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.PRNGKey(1), (n, n), jnp.float32)
    matmul = jax.jit(jnp.dot)
    matmul(a, b).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(a, b).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return 2 * n ** 3 / best


def peak_flops_for_mfu() -> float:
    """The device's published bf16 peak; on CPUs, a measured fp32 matmul.

    CPUs have no published peak, so there MFU is relative to the practical
    ceiling of the machine (a 2048^3 matmul, best of 10, about a second).
    """
    import jax
    from absl import logging

    device = jax.devices()[0]
    peak = peak_flops_per_device(device.device_kind)
    if peak is None:
        if device.platform != "cpu":
            logging.warning("no known peak FLOP/s for %s; MFU is relative to a measured fp32 "
                            "matmul", device.device_kind)
        peak = measure_matmul_flops_per_s()
    return peak
