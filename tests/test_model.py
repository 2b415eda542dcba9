"""The encoder, its heads and the pretraining loss, on tiny configs."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from bert_jax.checkpoints.flat_params import flat_params
from bert_jax.model.config import BertConfig, preset
from bert_jax.model.encoder import BertModel
from bert_jax.model.task_models import (
    BertForMultipleChoice,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from bert_jax.pretraining import loss

TINY = BertConfig(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=64, max_position_embeddings=24)
LOGICAL_AXES = {"vocab", "embed", "mlp", "heads", "kv", None}


def inputs(batch=2, length=10, vocab=97, seed=0):
    rng = np.random.default_rng(seed)
    ids = jnp.asarray(rng.integers(5, vocab, size=(batch, length)), jnp.int32)
    mask = jnp.ones((batch, length), jnp.int32).at[1, 6:].set(0)
    return ids, jnp.zeros_like(ids), mask


@pytest.mark.parametrize("name,expected", [("base", 110_106_428), ("large", 336_226_108)])
def test_parameter_counts_equal_transformers(name, expected):
    model = nnx.eval_shape(lambda: BertForPreTraining(preset(name), rngs=nnx.Rngs(0)))
    assert sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param))) == expected


def test_presets_have_the_published_shapes():
    shapes = {name: (c.num_hidden_layers, c.hidden_size, c.num_attention_heads)
              for name in ("tiny", "mini", "small", "medium", "base", "large")
              for c in [preset(name)]}
    assert shapes == {"tiny": (2, 128, 2), "mini": (4, 256, 4), "small": (4, 512, 8),
                      "medium": (8, 512, 8), "base": (12, 768, 12), "large": (24, 1024, 16)}


def test_every_parameter_has_logical_axis_names():
    model = BertForPreTraining(TINY, rngs=nnx.Rngs(0))
    for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        axes = var.get_metadata().get("out_sharding")
        assert axes is not None and len(axes) == var.ndim, path
        assert set(axes) <= LOGICAL_AXES, (path, axes)


def test_padding_does_not_change_real_tokens():
    model = BertModel(TINY, rngs=nnx.Rngs(0))
    ids, types, mask = inputs()
    out = model(ids, types, mask)
    # Different junk in the padded positions must not leak into real ones.
    junk = ids.at[1, 6:].set(3)
    out2 = model(junk, types, mask)
    np.testing.assert_allclose(out.sequence_output[1, :6], out2.sequence_output[1, :6], atol=1e-6)
    np.testing.assert_allclose(out.pooled_output, out2.pooled_output, atol=1e-6)


def test_dropout_path_equals_fused_attention_at_rate_zero():
    config = TINY.replace(hidden_dropout_prob=0.0, attention_probs_dropout_prob=1e-9)
    model = BertModel(config, rngs=nnx.Rngs(0))
    ids, types, mask = inputs()
    fused = model(ids, types, mask, deterministic=True)
    explicit = model(ids, types, mask, deterministic=False, rngs=nnx.Rngs(dropout=0))
    np.testing.assert_allclose(fused.sequence_output, explicit.sequence_output, atol=1e-5)


def test_dropout_is_random_in_training_and_off_in_eval():
    model = BertModel(TINY, rngs=nnx.Rngs(0))
    ids, types, mask = inputs()
    a = model(ids, types, mask, deterministic=False, rngs=nnx.Rngs(dropout=1)).sequence_output
    b = model(ids, types, mask, deterministic=False, rngs=nnx.Rngs(dropout=2)).sequence_output
    a2 = model(ids, types, mask, deterministic=False, rngs=nnx.Rngs(dropout=1)).sequence_output
    assert not np.allclose(a, b)
    np.testing.assert_array_equal(a, a2)
    e1, e2 = model(ids, types, mask).sequence_output, model(ids, types, mask).sequence_output
    np.testing.assert_array_equal(e1, e2)


def test_bf16_compute_keeps_fp32_params_and_tracks_fp32():
    model32 = BertForPreTraining(TINY, rngs=nnx.Rngs(0))
    model16 = BertForPreTraining(TINY.replace(dtype="bfloat16"), rngs=nnx.Rngs(0))
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(nnx.state(model16, nnx.Param)))
    ids, types, mask = inputs()
    out32 = model32(ids, types, mask)
    out16 = model16(ids, types, mask)
    assert out16.mlm_logits.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(out16.mlm_logits, np.float32), out32.mlm_logits,
                               atol=0.1)


def test_hidden_states_are_embeddings_then_each_layer():
    model = BertModel(TINY, rngs=nnx.Rngs(0))
    ids, types, mask = inputs()
    out = model(ids, types, mask, output_hidden_states=True)
    assert len(out.hidden_states) == TINY.num_hidden_layers + 1
    np.testing.assert_array_equal(out.hidden_states[-1], out.sequence_output)


def test_sequence_longer_than_positions_is_rejected():
    model = BertModel(TINY, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="max_position_embeddings=24"):
        model(jnp.ones((1, 25), jnp.int32))


def test_task_heads_output_shapes_and_share_the_encoder_paths():
    ids, types, mask = inputs()
    rngs = nnx.Rngs(0)
    assert BertForSequenceClassification(TINY, 3, rngs=rngs)(ids, types, mask).shape == (2, 3)
    start, end = BertForQuestionAnswering(TINY, rngs=rngs)(ids, types, mask)
    assert start.shape == end.shape == (2, 10)
    assert BertForTokenClassification(TINY, 5, rngs=rngs)(ids, types, mask).shape == (2, 10, 5)
    choices = jnp.stack([ids, ids + 1, ids + 2], axis=1)  # [batch, 3, length]
    mc = BertForMultipleChoice(TINY, rngs=rngs)
    assert mc(choices, jnp.zeros_like(choices), jnp.ones_like(choices)).shape == (2, 3)
    pretraining = set(flat_params(BertForPreTraining(TINY, rngs=rngs)))
    classifier = set(flat_params(BertForSequenceClassification(TINY, 2, rngs=rngs)))
    assert {p for p in classifier if p.startswith("bert/")} == {
        p for p in pretraining if p.startswith("bert/")}


def test_config_rejects_bad_fields():
    with pytest.raises(ValueError, match="hidden_act"):
        TINY.replace(hidden_act="swish")
    with pytest.raises(ValueError, match="num_attention_heads"):
        TINY.replace(num_attention_heads=5)
    with pytest.raises(ValueError, match="unknown BertConfig field"):
        BertConfig.from_dict({"hidden_size": 32, "rotary": True})


def test_pretraining_loss_is_google_berts():
    rng = np.random.default_rng(0)
    mlm_logits = rng.normal(size=(2, 3, 7)).astype(np.float32)
    nsp_logits = rng.normal(size=(2, 2)).astype(np.float32)
    batch = {"masked_lm_ids": np.array([[1, 2, 0], [3, 0, 0]]),
             "masked_lm_weights": np.array([[1, 1, 0], [1, 0, 0]], np.float32),
             "next_sentence_labels": np.array([[0], [1]])}
    sums = loss.pretraining_sums(mlm_logits, nsp_logits, batch)
    metrics = loss.metrics_from_sums(sums)

    def log_softmax(x):
        return x - np.log(np.exp(x).sum(-1, keepdims=True))

    lp = log_softmax(mlm_logits)
    ce = -np.take_along_axis(lp, batch["masked_lm_ids"][..., None], -1)[..., 0]
    w = batch["masked_lm_weights"]
    mlm = (w * ce).sum() / (w.sum() + 1e-5)
    nsp = -log_softmax(nsp_logits)[[0, 1], [0, 1]].mean()
    np.testing.assert_allclose(metrics["mlm_loss"], mlm, rtol=1e-6)
    np.testing.assert_allclose(metrics["loss"], mlm + nsp, rtol=1e-6)
    acc = ((mlm_logits.argmax(-1) == batch["masked_lm_ids"]) * w).sum() / (w.sum() + 1e-5)
    np.testing.assert_allclose(metrics["mlm_accuracy"], acc, rtol=1e-6)
    np.testing.assert_allclose(metrics["nsp_accuracy"],
                               (nsp_logits.argmax(-1) == np.array([0, 1])).mean())


def test_loss_sums_add_across_micro_batches():
    rng = np.random.default_rng(1)
    mlm_logits = rng.normal(size=(4, 3, 7)).astype(np.float32)
    nsp_logits = rng.normal(size=(4, 2)).astype(np.float32)
    batch = {"masked_lm_ids": rng.integers(0, 7, (4, 3)),
             "masked_lm_weights": np.array([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 0, 0]],
                                           np.float32),
             "next_sentence_labels": rng.integers(0, 2, (4, 1))}
    whole = loss.pretraining_sums(mlm_logits, nsp_logits, batch)
    halves = [loss.pretraining_sums(
        mlm_logits[s], nsp_logits[s], {k: v[s] for k, v in batch.items()})
        for s in (slice(0, 2), slice(2, 4))]
    summed = jax.tree.map(lambda a, b: a + b, *halves)
    np.testing.assert_allclose(loss.loss_from_sums(summed),
                               loss.loss_from_sums(whole), rtol=1e-6)
