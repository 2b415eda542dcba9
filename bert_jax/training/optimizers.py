"""Optimizers, the weight-decay mask, and gradient accumulation.

`make_optimizer(name, ...)` returns an optax transformation:

- `"bert_adam"`: google-research/bert's `AdamWeightDecayOptimizer`, exactly:
  Adam *without* bias correction, eps 1e-6, decoupled weight decay applied as
  `lr * (m / (sqrt(v) + eps) + wd * param)`. optax's adam always bias-corrects,
  hence the small `scale_by_bert_adam` below.
- `"adamw"`: `optax.adamw` (bias-corrected Adam, same decoupled decay).
- `"lamb"`: `optax.lamb`, NVIDIA's large-batch recipe (Adam moments, decayed
  weights, per-layer trust ratio on every parameter).

All three clip the global gradient norm first (1.0, as G-BERT does) and decay
only the weights `weight_decay_mask` selects. Optimizer moments are float32
whatever the gradient dtype.
"""
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from bert_jax.training.schedules import make_learning_rate_schedule

OPTIMIZERS = ("bert_adam", "adamw", "lamb")


def _key_name(key) -> str:
    """The name of one jax.tree_util path entry, whatever its kind."""
    if isinstance(key, jax.tree_util.DictKey):
        return str(key.key)
    if isinstance(key, jax.tree_util.GetAttrKey):
        return key.name
    if isinstance(key, jax.tree_util.SequenceKey):
        return str(key.idx)
    if isinstance(key, jax.tree_util.FlattenedIndexKey):
        return str(key.key)
    raise TypeError(f"unknown pytree path entry {key!r}")


def _decays(path) -> bool:
    """G-BERT's `re.search("LayerNorm|layer_norm|bias", name)` on our path names."""
    # An NNX State leaf sits under the Variable's `.value` attribute; that entry
    # is a wrapper, not part of the parameter's name.
    if path and isinstance(path[-1], jax.tree_util.GetAttrKey) and path[-1].name == "value":
        path = path[:-1]
    names = [_key_name(k) for k in path]
    if any("layer_norm" in n or "LayerNorm" in n for n in names):
        return False
    return not (names and "bias" in names[-1])


def weight_decay_mask(params: Any) -> Any:
    """Returns a tree like `params` with True where weight decay applies.

    A leaf decays unless a path component contains "layer_norm" (LayerNorm
    scales and biases) or its own name contains "bias" (every dense bias and
    `mlm_head/output_bias`). Works on plain nested dicts/lists and on NNX
    `State`s (whose trailing `.value` entry is ignored).
    """
    return jax.tree_util.tree_map_with_path(lambda path, _: _decays(path), params)


class BertAdamState(NamedTuple):
    """First and second moments, float32."""

    mu: optax.Updates
    nu: optax.Updates


def scale_by_bert_adam(
    b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6
) -> optax.GradientTransformation:
    """Adam's direction `m / (sqrt(v) + eps)` with NO bias correction (G-BERT)."""

    def zeros_f32(p):
        return jnp.zeros(jnp.shape(p), jnp.float32)

    def init_fn(params):
        return BertAdamState(mu=jax.tree.map(zeros_f32, params), nu=jax.tree.map(zeros_f32, params))

    def update_fn(updates, state, params=None):
        del params
        grads = jax.tree.map(lambda g: g.astype(jnp.float32), updates)
        mu = jax.tree.map(lambda m, g: b1 * m + (1.0 - b1) * g, state.mu, grads)
        nu = jax.tree.map(lambda v, g: b2 * v + (1.0 - b2) * jnp.square(g), state.nu, grads)
        direction = jax.tree.map(
            lambda m, v, g: (m / (jnp.sqrt(v) + eps)).astype(g.dtype), mu, nu, updates
        )
        return direction, BertAdamState(mu=mu, nu=nu)

    return optax.GradientTransformation(init_fn, update_fn)


def bert_adam(
    learning_rate: optax.ScalarOrSchedule,
    *,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-6,
    weight_decay: float = 0.01,
    mask: Any = weight_decay_mask,
) -> optax.GradientTransformation:
    """google-research/bert's AdamWeightDecayOptimizer (without its clipping).

    param <- param - lr * (m / (sqrt(v) + eps) + weight_decay * param), the decay
    term only where `mask` is True.
    """
    return optax.chain(
        scale_by_bert_adam(b1=b1, b2=b2, eps=eps),
        optax.add_decayed_weights(weight_decay, mask=mask),
        optax.scale_by_learning_rate(learning_rate),
    )


def make_optimizer(
    name: str,
    learning_rate: optax.ScalarOrSchedule,
    *,
    weight_decay: float = 0.01,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-6,
    clip_norm: float | None = 1.0,
) -> optax.GradientTransformation:
    """Returns global-norm clipping followed by the optimizer `name`.

    Args:
      name: one of `OPTIMIZERS` ("bert_adam", "adamw", "lamb").
      learning_rate: a float or a schedule (see `schedules.py`).
      weight_decay: decoupled decay rate, applied where `weight_decay_mask`
        says so (scaled by the learning rate in all three optimizers).
      b1, b2, eps: Adam moment decays and epsilon (G-BERT: 0.9, 0.999, 1e-6).
      clip_norm: global gradient norm limit applied before the optimizer, as in
        G-BERT's `tf.clip_by_global_norm(grads, 1.0)`; None disables it.
    """
    if name == "bert_adam":
        core = bert_adam(learning_rate, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay)
    elif name == "adamw":
        core = optax.adamw(
            learning_rate, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay, mask=weight_decay_mask
        )
    elif name == "lamb":
        core = optax.lamb(
            learning_rate, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay, mask=weight_decay_mask
        )
    else:
        raise ValueError(f"optimizer {name!r} is not one of {OPTIMIZERS}")
    if clip_norm is None:
        return core
    return optax.chain(optax.clip_by_global_norm(clip_norm), core)


def optimizer_and_schedule(
    name: str,
    *,
    learning_rate: float,
    num_steps: int,
    warmup_steps: int,
    schedule: str = "bert",
    decay_power: float = 1.0,
    weight_decay: float = 0.01,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-6,
    max_grad_norm: float = 1.0,
) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """The optimizer of a run's `train` config section, and its learning-rate schedule.

    The arguments are the config fields every trainer shares (see
    configs/pretrain.py); `max_grad_norm` <= 0 turns clipping off.
    """
    lr = make_learning_rate_schedule(peak_value=learning_rate, num_train_steps=num_steps,
                                     warmup_steps=warmup_steps, kind=schedule, power=decay_power)
    optimizer = make_optimizer(name, lr, weight_decay=weight_decay, b1=b1, b2=b2, eps=eps,
                               clip_norm=max_grad_norm if max_grad_norm > 0 else None)
    return optimizer, lr


LossFn = Callable[[Any, Any, jax.Array], tuple[dict[str, jax.Array], Any]]


def _split_micro_batches(batch: Any, num_micro_batches: int) -> Any:
    """[k * b, ...] leaves -> [k, b, ...]; micro-batch i takes rows i, i + k, ...

    Strided rather than contiguous: when the batch axis is sharded over data
    devices, each device's block then feeds every micro-batch equally, so no
    device idles while another computes.
    """

    def split(x):
        if x.shape[0] % num_micro_batches:
            raise ValueError(
                f"batch leaf of shape {x.shape} does not split into "
                f"{num_micro_batches} micro-batches"
            )
        x = x.reshape((x.shape[0] // num_micro_batches, num_micro_batches) + x.shape[1:])
        return jnp.swapaxes(x, 0, 1)  # [k, b, ...]

    return jax.tree.map(split, batch)


def accumulate_gradients(
    loss_fn: LossFn,
    params: Any,
    batch: Any,
    rng: jax.Array,
    *,
    num_micro_batches: int,
    denominators: dict[str, jax.Array],
) -> tuple[Any, dict[str, jax.Array], Any]:
    """Gradients of a ratio-of-sums loss over a batch, computed micro-batch by micro-batch.

    BERT's losses are ratios: MLM = sum(w * CE) / (sum(w) + 1e-5) over the
    whole batch, NSP = sum(CE) / batch_size. Averaging k micro-batch *losses*
    would weight a micro-batch with few masked tokens as much as a full one, so
    the interface splits each term into a numerator (a sum over examples, the
    only part that depends on params) and a denominator over the *whole* batch
    (which does not depend on params). Every micro-batch's numerators are
    divided by the whole-batch denominators, so the summed gradients equal the
    gradient of the one-big-batch loss.

    Args:
      loss_fn: `loss_fn(params, micro_batch, rng) -> (numerators, aux)`;
        numerators is `{term: scalar sum over the micro-batch}` (e.g.
        `{"mlm": sum(w * CE), "nsp": sum(CE)}`); aux is a pytree of quantities
        that add up over micro-batches (e.g. counts of correct predictions).
      params: what to differentiate with respect to.
      batch: pytree of arrays with leading axis k * b.
      rng: base key; micro-batch i gets `fold_in(rng, i)` (with k == 1, `rng`).
      num_micro_batches: k; each leaf's leading axis must divide by it.
      denominators: `{term: scalar}` over the whole batch, same keys as the
        numerators (e.g. `{"mlm": sum(w) + 1e-5, "nsp": batch_size}`).

    Returns:
      (grads of sum_t numerators[t] / denominators[t], numerators summed over
      the batch, aux summed over the batch). The loss of term t is
      `numerators[t] / denominators[t]`.
    """

    def objective(p, micro_batch, key):
        numerators, aux = loss_fn(p, micro_batch, key)
        if set(numerators) != set(denominators):
            raise ValueError(
                f"loss terms {sorted(numerators)} differ from denominators {sorted(denominators)}"
            )
        total = sum(numerators[t] / denominators[t] for t in sorted(numerators))
        return total, (numerators, aux)

    grad_fn = jax.grad(objective, has_aux=True)
    if num_micro_batches == 1:
        grads, (numerators, aux) = grad_fn(params, batch, rng)
        return grads, numerators, aux

    micro_batches = _split_micro_batches(batch, num_micro_batches)
    first = jax.tree.map(lambda x: x[0], micro_batches)
    shapes = jax.eval_shape(grad_fn, params, first, rng)
    zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

    def body(carry, inputs):
        index, micro_batch = inputs
        grads, (numerators, aux) = grad_fn(params, micro_batch, jax.random.fold_in(rng, index))
        return jax.tree.map(jnp.add, carry, (grads, (numerators, aux))), None

    # scan, not a Python loop: the compiled step holds one micro-batch's graph.
    (grads, (numerators, aux)), _ = jax.lax.scan(
        body, zeros, (jnp.arange(num_micro_batches), micro_batches)
    )
    return grads, numerators, aux
