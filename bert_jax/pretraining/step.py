"""The pure pretraining and evaluation steps (masked LM + next sentence).

They work on the train state of bert_jax.training.state. The model is rebuilt
inside the step with `nnx.merge(graphdef, params)`; the graphdef is static
and closed over.
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from bert_jax.pretraining import loss
from bert_jax.training.optimizers import accumulate_gradients
from bert_jax.training.state import TrainState
from bert_jax.training.updates import apply_gradients, dropout_key


def model_inputs(batch: dict) -> dict:
    """The model's keyword arguments from a pretraining batch (G-BERT feature names)."""
    return dict(input_ids=batch["input_ids"], token_type_ids=batch["segment_ids"],
                attention_mask=batch["input_mask"],
                masked_lm_positions=batch["masked_lm_positions"])


def make_train_step(graphdef, optimizer: optax.GradientTransformation,
                    learning_rate: Callable[[jax.Array], jax.Array],
                    grad_accum_steps: int = 1):
    """Returns train_step(state, batch) -> (state, metrics); jit it with donation.

    Non-finite steps are not applied (training.updates.apply_gradients).
    """

    def loss_fn(params, micro_batch, key):
        model = nnx.merge(graphdef, params)
        out = model(**model_inputs(micro_batch), deterministic=False, rngs=nnx.Rngs(dropout=key))
        sums = loss.pretraining_sums(out.mlm_logits, out.nsp_logits, micro_batch)
        numerators = {"mlm": sums.pop("mlm_loss_sum"), "nsp": sums.pop("nsp_loss_sum")}
        return numerators, sums

    def train_step(state: TrainState, batch: dict) -> tuple[TrainState, dict]:
        key = dropout_key(state)
        weights = batch["masked_lm_weights"].astype(jnp.float32)
        denominators = {"mlm": jnp.sum(weights) + loss.MLM_DENOMINATOR_EPS,
                        "nsp": jnp.asarray(weights.shape[0], jnp.float32)}
        grads, numerators, sums = accumulate_gradients(
            loss_fn, state["params"], batch, key, num_micro_batches=grad_accum_steps,
            denominators=denominators)
        sums = dict(sums, mlm_loss_sum=numerators["mlm"], nsp_loss_sum=numerators["nsp"])
        metrics = loss.metrics_from_sums(sums)
        return apply_gradients(state, grads, optimizer, learning_rate, metrics)

    return train_step


def make_eval_step(graphdef):
    """Returns eval_step(params, batch) -> summed counts (see pretraining_loss)."""

    def eval_step(params, batch: dict) -> dict:
        model = nnx.merge(graphdef, params)
        out = model(**model_inputs(batch), deterministic=True)
        return loss.pretraining_sums(out.mlm_logits, out.nsp_logits, batch)

    return eval_step
