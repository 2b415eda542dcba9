"""Schedules, optimizers, the weight-decay mask and gradient accumulation."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from bert_jax.training import optimizers, schedules

PEAK, TRAIN_STEPS, WARMUP = 1e-4, 100, 10


@pytest.mark.parametrize(
    "step, expected",
    [
        (0, 0.0),
        (1, 1e-5),
        (9, 9e-5),  # last warmup step: peak * 9 / 10
        (10, 9e-5),  # decay counted from step 0: peak * (1 - 10 / 100)
        (11, 8.9e-5),
        (50, 5e-5),
        (99, 1e-6),
        (100, 0.0),
        (150, 0.0),
    ],
)
def test_bert_schedule_warmup_replaces_decay(step, expected):
    schedule = schedules.make_learning_rate_schedule(
        peak_value=PEAK, num_train_steps=TRAIN_STEPS, warmup_steps=WARMUP
    )
    np.testing.assert_allclose(float(schedule(step)), expected, rtol=1e-5, atol=1e-12)  # float32


@pytest.mark.parametrize(
    "step, expected",
    [
        (0, 0.0),
        (1, 1e-5),
        (9, 9e-5),
        (10, 1e-4),  # warmup reaches the peak, then decays over the other 90 steps
        (11, 1e-4 * (1 - 1 / 90)),
        (55, 5e-5),
        (99, 1e-4 / 90),
        (100, 0.0),
        (150, 0.0),
    ],
)
def test_warmup_then_decay_schedule(step, expected):
    schedule = schedules.make_learning_rate_schedule(
        peak_value=PEAK, num_train_steps=TRAIN_STEPS, warmup_steps=WARMUP, kind="warmup_then_decay"
    )
    np.testing.assert_allclose(float(schedule(step)), expected, rtol=1e-5, atol=1e-12)  # float32


def test_polynomial_power_and_no_warmup():
    schedule = schedules.make_learning_rate_schedule(
        peak_value=PEAK, num_train_steps=TRAIN_STEPS, warmup_steps=0, power=0.5
    )
    np.testing.assert_allclose(float(schedule(0)), 1e-4, rtol=1e-6)
    np.testing.assert_allclose(float(schedule(75)), 1e-4 * 0.5, rtol=1e-6)
    # Jittable with a traced step, as optax calls it.
    np.testing.assert_allclose(float(jax.jit(schedule)(jnp.int32(75))), 5e-5, rtol=1e-6)


def test_schedule_rejects_bad_config():
    with pytest.raises(ValueError, match="kind"):
        schedules.make_learning_rate_schedule(
            peak_value=1.0, num_train_steps=10, warmup_steps=1, kind="cosine"
        )
    with pytest.raises(ValueError, match="warmup_steps"):
        schedules.make_learning_rate_schedule(peak_value=1.0, num_train_steps=10, warmup_steps=10)


def _bert_like_params():
    def dense(n_in, n_out, name_bias="bias"):
        return {
            "kernel": np.ones((n_in, n_out), np.float32),
            name_bias: np.ones((n_out,), np.float32),
        }

    def layer_norm(n):
        return {"scale": np.ones((n,), np.float32), "bias": np.zeros((n,), np.float32)}

    layer = {
        "attention": {"query": dense(4, 4), "output": dense(4, 4)},
        "attention_layer_norm": layer_norm(4),
        "mlp": {"intermediate": dense(4, 8), "output": dense(8, 4)},
        "mlp_layer_norm": layer_norm(4),
    }
    return {
        "embeddings": {
            "word_embeddings": {"embedding": np.ones((10, 4), np.float32)},
            "layer_norm": layer_norm(4),
        },
        "encoder": {"layers": [layer, jax.tree.map(np.copy, layer)]},  # SequenceKey entries
        "mlm_head": {"transform": dense(4, 4), "output_bias": np.zeros((10,), np.float32)},
    }


def _decayed_paths(mask):
    flat = jax.tree_util.tree_flatten_with_path(mask)[0]
    return sorted(
        "/".join(optimizers._key_name(k) for k in path) for path, decays in flat if decays
    )


def test_weight_decay_mask_selects_exactly_kernels_and_embeddings():
    mask = optimizers.weight_decay_mask(_bert_like_params())
    assert len(jax.tree.leaves(mask)) == 3 + 2 * 12 + 3
    assert _decayed_paths(mask) == sorted(
        ["embeddings/word_embeddings/embedding", "mlm_head/transform/kernel"]
        + [
            f"encoder/layers/{i}/{m}/kernel"
            for i in range(2)
            for m in ("attention/query", "attention/output", "mlp/intermediate", "mlp/output")
        ]
    )


def test_weight_decay_mask_on_nnx_state():
    class Tiny(nnx.Module):
        def __init__(self, rngs):
            self.dense = nnx.Linear(2, 3, rngs=rngs)
            self.layer_norm = nnx.LayerNorm(3, rngs=rngs)

    state = nnx.state(Tiny(nnx.Rngs(0)), nnx.Param)
    # NNX leaves end in GetAttrKey("value"); the mask ignores that wrapper entry.
    assert _decayed_paths(optimizers.weight_decay_mask(state)) == ["dense/kernel/value"]


def _numpy_bert_adam(params, grads_per_step, lrs, wd=0.01, b1=0.9, b2=0.999, eps=1e-6):
    """google-research/bert's optimization.py, transcribed to numpy (with its clipping)."""
    decay = {k: k.endswith("kernel") for k in params}
    params = {k: v.astype(np.float64) for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v = {k: np.zeros_like(p) for k, p in params.items()}
    for grads, lr in zip(grads_per_step, lrs):
        norm = np.sqrt(sum(np.sum(np.square(g.astype(np.float64))) for g in grads.values()))
        for k in params:
            g = grads[k] * 1.0 / max(norm, 1.0)  # tf.clip_by_global_norm(grads, 1.0)
            m[k] = b1 * m[k] + (1 - b1) * g
            v[k] = b2 * v[k] + (1 - b2) * g * g
            update = m[k] / (np.sqrt(v[k]) + eps)
            if decay[k]:
                update += wd * params[k]
            params[k] = params[k] - lr * update
    return params


def test_bert_adam_matches_google_bert_numpy():
    rng = np.random.default_rng(0)
    params = {
        "dense/kernel": rng.normal(size=(3, 4)).astype(np.float32),
        "dense/bias": rng.normal(size=(4,)).astype(np.float32),
        "layer_norm/scale": rng.normal(size=(4,)).astype(np.float32),
    }
    # Steps alternate between norms above and below the clipping threshold.
    grads_per_step = [
        {k: (rng.normal(size=p.shape) * scale).astype(np.float32) for k, p in params.items()}
        for scale in (0.05, 3.0, 0.1, 2.0, 0.02, 5.0)
    ]
    schedule = schedules.make_learning_rate_schedule(
        peak_value=0.1, num_train_steps=10, warmup_steps=2
    )
    tx = optimizers.make_optimizer("bert_adam", schedule)
    state = tx.init(params)
    ours = params

    @jax.jit
    def step(p, s, g):
        updates, s = tx.update(g, s, p)
        return optax.apply_updates(p, updates), s

    for grads in grads_per_step:
        ours, state = step(ours, state, grads)
    expected = _numpy_bert_adam(params, grads_per_step, [float(schedule(t)) for t in range(6)])
    for k in params:
        np.testing.assert_allclose(ours[k], expected[k], rtol=2e-6, atol=2e-7, err_msg=k)
    # Not a trivial pass: the parameters moved by far more than the tolerance.
    assert np.abs(expected["dense/kernel"] - params["dense/kernel"]).max() > 0.1


def test_bert_adam_has_no_bias_correction():
    # One step with grad g: bias-corrected Adam moves by ~lr; G-BERT's moves by
    # lr * (0.1 g) / (sqrt(0.001) |g|) = lr * 3.162...
    tx = optimizers.bert_adam(1.0, weight_decay=0.0)
    params = {"kernel": jnp.zeros((2,))}
    updates, _ = tx.update({"kernel": jnp.array([0.5, -2.0])}, tx.init(params), params)
    step = 0.1 / np.sqrt(0.001)
    np.testing.assert_allclose(updates["kernel"], [-step, step], rtol=1e-4)


def test_optimizer_state_is_float32_for_bf16_params():
    params = {"kernel": jnp.ones((2, 2), jnp.bfloat16)}
    state = optimizers.bert_adam(1e-3).init(params)
    assert state[0].mu["kernel"].dtype == jnp.float32
    assert state[0].nu["kernel"].dtype == jnp.float32


@pytest.mark.parametrize("name", optimizers.OPTIMIZERS)
def test_weight_decay_reaches_only_masked_leaves(name):
    # Zero gradients: the Adam part is 0, so any movement is weight decay.
    params = jax.tree.map(jnp.asarray, _bert_like_params())
    tx = optimizers.make_optimizer(name, 0.5, weight_decay=0.1)
    zero_grads = jax.tree.map(jnp.zeros_like, params)
    updates, _ = jax.jit(tx.update)(zero_grads, tx.init(params), params)
    moved = jax.tree.map(lambda u: bool(jnp.any(u != 0)), updates)
    assert moved == optimizers.weight_decay_mask(params)
    kernel_update = updates["mlm_head"]["transform"]["kernel"]
    # adamw / bert_adam: -lr * wd * param; lamb's trust ratio rescales wd * param to |param|.
    expected = -0.5 if name == "lamb" else -0.5 * 0.1
    np.testing.assert_allclose(kernel_update, np.full((4, 4), expected), rtol=1e-6)


def test_make_optimizer_rejects_unknown_name():
    with pytest.raises(ValueError, match="sgd"):
        optimizers.make_optimizer("sgd", 1e-3)


def _weighted_ce_loss_terms(params, batch, rng):
    """A linear 'MLM' with G-BERT's weighted loss plus an 'NSP' mean CE."""
    del rng
    logits = batch["x"] @ params["w"] + params["b"]  # [batch, preds, vocab]
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"])  # [batch, preds]
    nsp_logits = batch["x"][:, 0] @ params["w_nsp"]  # [batch, 2]
    nsp_ce = optax.softmax_cross_entropy_with_integer_labels(nsp_logits, batch["nsp"])
    numerators = {"mlm": jnp.sum(batch["w"] * ce), "nsp": jnp.sum(nsp_ce)}
    aux = {"masked_correct": jnp.sum(batch["w"] * (jnp.argmax(logits, -1) == batch["labels"]))}
    return numerators, aux


def _accumulation_problem():
    rng = np.random.default_rng(1)
    batch_size, preds, dim, vocab = 8, 5, 6, 7
    weights = (rng.random((batch_size, preds)) < 0.5).astype(np.float32)
    weights[0] = 0.0  # micro-batches with very different numbers of real predictions
    weights[1::4] = 1.0
    batch = {
        "x": rng.normal(size=(batch_size, preds, dim)).astype(np.float32),
        "labels": rng.integers(0, vocab, (batch_size, preds)).astype(np.int32),
        "w": weights,
        "nsp": rng.integers(0, 2, (batch_size,)).astype(np.int32),
    }
    params = {
        "w": jnp.asarray(rng.normal(size=(dim, vocab)), jnp.float32),
        "b": jnp.asarray(rng.normal(size=(vocab,)), jnp.float32),
        "w_nsp": jnp.asarray(rng.normal(size=(dim, 2)), jnp.float32),
    }
    denominators = {"mlm": jnp.sum(batch["w"]) + 1e-5, "nsp": jnp.float32(batch_size)}
    return params, batch, denominators


def test_accumulated_gradients_equal_one_big_batch():
    params, batch, denominators = _accumulation_problem()

    def full_loss(p):
        numerators, _ = _weighted_ce_loss_terms(p, batch, None)
        return numerators["mlm"] / denominators["mlm"] + numerators["nsp"] / denominators["nsp"]

    expected = jax.jit(jax.grad(full_loss))(params)
    full_numerators, full_aux = jax.jit(_weighted_ce_loss_terms)(params, batch, None)
    key = jax.random.key(0)
    for k in (1, 2, 4):
        grads, numerators, aux = jax.jit(
            lambda p, b: optimizers.accumulate_gradients(
                _weighted_ce_loss_terms, p, b, key, num_micro_batches=k, denominators=denominators
            )
        )(params, batch)
        for name in params:
            np.testing.assert_allclose(grads[name], expected[name], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(numerators["mlm"], full_numerators["mlm"], rtol=1e-6)
        np.testing.assert_allclose(aux["masked_correct"], full_aux["masked_correct"])

    # The pitfall this interface avoids: averaging per-micro-batch MLM losses.
    micro = optimizers._split_micro_batches(batch, 4)

    def naive_loss(p):
        losses = []
        for i in range(4):
            mb = jax.tree.map(lambda x: x[i], micro)
            n, _ = _weighted_ce_loss_terms(p, mb, None)
            losses.append(n["mlm"] / (jnp.sum(mb["w"]) + 1e-5) + n["nsp"] / 2)
        return sum(losses) / 4

    naive = jax.jit(jax.grad(naive_loss))(params)
    assert np.abs(naive["w"] - expected["w"]).max() > 1e-3


def test_micro_batches_are_strided_and_keys_differ():
    batch = {"i": jnp.arange(6)}
    micro = optimizers._split_micro_batches(batch, 3)
    np.testing.assert_array_equal(micro["i"], [[0, 3], [1, 4], [2, 5]])

    def loss_terms(params, micro_batch, rng):
        noise = jax.random.uniform(rng, ())
        return {"t": params * jnp.sum(micro_batch["i"])}, {"noise": noise}

    grads, numerators, aux = optimizers.accumulate_gradients(
        loss_terms, jnp.float32(2.0), batch, jax.random.key(3),
        num_micro_batches=3, denominators={"t": jnp.float32(5.0)},
    )
    np.testing.assert_allclose(grads, 15 / 5)
    np.testing.assert_allclose(numerators["t"], 30.0)
    keys = [jax.random.fold_in(jax.random.key(3), i) for i in range(3)]
    expected_noise = sum(jax.random.uniform(k, ()) for k in keys)
    np.testing.assert_allclose(aux["noise"], expected_noise, rtol=1e-6)
    with pytest.raises(ValueError, match="micro-batches"):
        optimizers.accumulate_gradients(
            loss_terms, jnp.float32(2.0), batch, jax.random.key(3),
            num_micro_batches=4, denominators={"t": jnp.float32(5.0)},
        )
