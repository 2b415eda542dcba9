"""The end of every train step: apply the gradients, unless the step went non-finite."""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import optax

from bert_jax.training.state import TrainState


def dropout_key(state: TrainState) -> jax.Array:
    """This step's dropout key: the run's key folded with the step number.

    A resumed run therefore draws the same masks as an uninterrupted one.
    """
    return jax.random.fold_in(jax.random.wrap_key_data(state["rng"]), state["step"])


def apply_gradients(state: TrainState, grads, optimizer: optax.GradientTransformation,
                    learning_rate: Callable[[jax.Array], jax.Array], metrics: dict
                    ) -> tuple[TrainState, dict]:
    """One optimizer update; returns the new state and `metrics` with step figures added.

    A step whose loss or gradient norm is not finite leaves the state as it
    was and reports `finite = False`; the loop stops on it, so no checkpoint
    ever holds NaN parameters.
    """
    step = state["step"]
    grad_norm = optax.global_norm(grads)
    updates, opt_state = optimizer.update(grads, state["opt_state"], state["params"])
    new_state = {"step": step + 1, "params": optax.apply_updates(state["params"], updates),
                 "opt_state": opt_state, "rng": state["rng"]}
    finite = jnp.isfinite(metrics["loss"]) & jnp.isfinite(grad_norm)
    new_state = jax.tree.map(lambda new, old: jnp.where(finite, new, old), new_state, state)
    return new_state, dict(metrics, grad_norm=grad_norm, learning_rate=learning_rate(step),
                           finite=finite)
