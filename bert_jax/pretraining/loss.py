"""google-research/bert's pretraining losses and metrics.

MLM loss = sum(w * CE) / (sum(w) + 1e-5) over the masked positions, where w is
`masked_lm_weights` (0 on padding predictions); NSP loss = mean CE; the
training loss is their sum. Metrics are the weighted MLM accuracy (MLPerf's
target metric) and the NSP accuracy.

Everything is returned as sums with their denominators so that gradient
accumulation and multi-batch evaluation combine them exactly: the mean over k
micro-batches of b examples equals the mean over one batch of k*b examples only
if numerators and denominators are summed before dividing.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

# google-research/bert adds this to the weight sum so an all-padding batch
# gives loss 0 rather than NaN.
MLM_DENOMINATOR_EPS = 1e-5


def _cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    # Log-softmax in float32 whatever the compute dtype: bf16 logits over a
    # 30k vocabulary lose the small probabilities otherwise.
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return -jnp.take_along_axis(log_probs, labels[..., None].astype(jnp.int32), axis=-1)[..., 0]


def pretraining_sums(mlm_logits: jax.Array, nsp_logits: jax.Array, batch: dict) -> dict:
    """Per-batch sums from which every loss and metric is a ratio.

    mlm_logits: [batch, num_predictions, vocab]; nsp_logits: [batch, 2];
    batch: masked_lm_ids, masked_lm_weights [batch, num_predictions] and
    next_sentence_labels [batch] or [batch, 1]. An optional `is_real` [batch]
    (0 for the padding examples of a final eval batch) masks whole examples.
    """
    weights = batch["masked_lm_weights"].astype(jnp.float32)
    labels = batch["masked_lm_ids"]
    nsp_labels = batch["next_sentence_labels"].reshape(-1)
    example_weights = batch.get("is_real")
    if example_weights is None:
        example_weights = jnp.ones(nsp_labels.shape, jnp.float32)
    example_weights = example_weights.astype(jnp.float32)
    weights = weights * example_weights[:, None]

    mlm_ce = _cross_entropy(mlm_logits, labels)
    mlm_correct = (jnp.argmax(mlm_logits, axis=-1) == labels).astype(jnp.float32)
    nsp_ce = _cross_entropy(nsp_logits, nsp_labels)
    nsp_correct = (jnp.argmax(nsp_logits, axis=-1) == nsp_labels).astype(jnp.float32)
    return {
        "mlm_loss_sum": jnp.sum(weights * mlm_ce),
        "mlm_correct_sum": jnp.sum(weights * mlm_correct),
        "mlm_weight_sum": jnp.sum(weights),
        "nsp_loss_sum": jnp.sum(example_weights * nsp_ce),
        "nsp_correct_sum": jnp.sum(example_weights * nsp_correct),
        "nsp_count": jnp.sum(example_weights),
    }


def loss_from_sums(sums: dict) -> jax.Array:
    """The training loss: weighted-mean MLM CE + mean NSP CE (G-BERT)."""
    mlm = sums["mlm_loss_sum"] / (sums["mlm_weight_sum"] + MLM_DENOMINATOR_EPS)
    nsp = sums["nsp_loss_sum"] / jnp.maximum(sums["nsp_count"], 1.0)
    return mlm + nsp


def metrics_from_sums(sums: dict) -> dict:
    """loss, mlm_loss, mlm_accuracy, nsp_loss, nsp_accuracy from summed counts."""
    mlm_weight = sums["mlm_weight_sum"] + MLM_DENOMINATOR_EPS
    nsp_count = jnp.maximum(sums["nsp_count"], 1.0)
    return {
        "loss": loss_from_sums(sums),
        "mlm_loss": sums["mlm_loss_sum"] / mlm_weight,
        "mlm_accuracy": sums["mlm_correct_sum"] / mlm_weight,
        "nsp_loss": sums["nsp_loss_sum"] / nsp_count,
        "nsp_accuracy": sums["nsp_correct_sum"] / nsp_count,
    }
