"""The pure pretraining and evaluation steps.

The train state is a plain pytree, so that jit, Orbax and sharding see arrays
and nothing else:

    {"step": int32 [], "params": nested dict (nnx.to_pure_dict),
     "opt_state": optax state, "rng": uint32 [2] (raw key data)}

The model is rebuilt inside the step with `nnx.merge(graphdef, params)`; the
graphdef is static and closed over. Dropout keys are derived from the state's
key and the step number, so a resumed run draws the same masks as an
uninterrupted one.
"""
from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from bert_jax import pretraining_loss
from bert_jax.optimizers import accumulate_gradients

TrainState = dict[str, Any]


def model_inputs(batch: dict) -> dict:
    """The model's keyword arguments from a pretraining batch (G-BERT feature names)."""
    return dict(input_ids=batch["input_ids"], token_type_ids=batch["segment_ids"],
                attention_mask=batch["input_mask"],
                masked_lm_positions=batch["masked_lm_positions"])


def init_train_state(params: dict, optimizer: optax.GradientTransformation,
                     seed: int) -> TrainState:
    """The initial state around `params` (nnx.to_pure_dict of the model's Params)."""
    return {"step": jnp.zeros((), jnp.int32), "params": params,
            "opt_state": optimizer.init(params),
            "rng": jax.random.key_data(jax.random.PRNGKey(seed))}


def make_train_step(graphdef, optimizer: optax.GradientTransformation,
                    learning_rate: Callable[[jax.Array], jax.Array],
                    grad_accum_steps: int = 1):
    """Returns train_step(state, batch) -> (state, metrics); jit it with donation.

    A step whose loss or gradient norm is not finite leaves the state as it
    was and reports `finite = False`; the loop stops on it, so no checkpoint
    ever holds NaN parameters.
    """

    def loss_fn(params, micro_batch, key):
        model = nnx.merge(graphdef, params)
        out = model(**model_inputs(micro_batch), deterministic=False, rngs=nnx.Rngs(dropout=key))
        sums = pretraining_loss.pretraining_sums(out.mlm_logits, out.nsp_logits, micro_batch)
        numerators = {"mlm": sums.pop("mlm_loss_sum"), "nsp": sums.pop("nsp_loss_sum")}
        return numerators, sums

    def train_step(state: TrainState, batch: dict) -> tuple[TrainState, dict]:
        step = state["step"]
        key = jax.random.fold_in(jax.random.wrap_key_data(state["rng"]), step)
        weights = batch["masked_lm_weights"].astype(jnp.float32)
        denominators = {"mlm": jnp.sum(weights) + pretraining_loss.MLM_DENOMINATOR_EPS,
                        "nsp": jnp.asarray(weights.shape[0], jnp.float32)}
        grads, numerators, sums = accumulate_gradients(
            loss_fn, state["params"], batch, key, num_micro_batches=grad_accum_steps,
            denominators=denominators)
        sums = dict(sums, mlm_loss_sum=numerators["mlm"], nsp_loss_sum=numerators["nsp"])
        metrics = pretraining_loss.metrics_from_sums(sums)
        grad_norm = optax.global_norm(grads)
        updates, opt_state = optimizer.update(grads, state["opt_state"], state["params"])
        new_state = {"step": step + 1, "params": optax.apply_updates(state["params"], updates),
                     "opt_state": opt_state, "rng": state["rng"]}
        finite = jnp.isfinite(metrics["loss"]) & jnp.isfinite(grad_norm)
        new_state = jax.tree.map(lambda new, old: jnp.where(finite, new, old), new_state, state)
        metrics.update(grad_norm=grad_norm, learning_rate=learning_rate(step), finite=finite)
        return new_state, metrics

    return train_step


def make_eval_step(graphdef):
    """Returns eval_step(params, batch) -> summed counts (see pretraining_loss)."""

    def eval_step(params, batch: dict) -> dict:
        model = nnx.merge(graphdef, params)
        out = model(**model_inputs(batch), deterministic=True)
        return pretraining_loss.pretraining_sums(out.mlm_logits, out.nsp_logits, batch)

    return eval_step
