"""Packed fine-tuning batches: same examples, same outputs, less padding."""
import jax.numpy as jnp
import numpy as np
from flax import nnx

from bert_jax.model import BertConfig, BertForSequenceClassification
from bert_jax.training.packing import pack_batch, pack_rows, packed_attention_mask

CONFIG = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=64, max_position_embeddings=64)


def random_batch(rng, n=9, length=24):
    lengths = rng.integers(3, length + 1, n)
    ids = np.zeros((n, length), np.int32)
    segments = np.zeros((n, length), np.int32)
    for i, k in enumerate(lengths):
        ids[i, :k] = rng.integers(5, CONFIG.vocab_size, k)
        segments[i, k // 2:k] = 1
    mask = (np.arange(length)[None] < lengths[:, None]).astype(np.int32)
    return {"input_ids": ids, "segment_ids": segments, "input_mask": mask,
            "length": lengths.astype(np.int32), "label": np.arange(n, dtype=np.int32)}


def test_rows_hold_every_example_once_and_never_overflow():
    rng = np.random.default_rng(0)
    for _ in range(50):
        lengths = rng.integers(1, 33, rng.integers(1, 40))
        rows = pack_rows(lengths, 32)
        assert sorted(i for row in rows for i in row) == list(range(len(lengths)))
        assert all(sum(lengths[i] for i in row) <= 32 for row in rows)
        # First fit by decreasing length never needs more than twice the ideal rows.
        assert len(rows) <= 2 * np.ceil(lengths.sum() / 32)


def test_packed_rows_give_every_example_its_unpacked_logits():
    rng = np.random.default_rng(1)
    batch = random_batch(rng)
    model = BertForSequenceClassification(CONFIG, 3, rngs=nnx.Rngs(0))
    unpacked = model(jnp.asarray(batch["input_ids"]), jnp.asarray(batch["segment_ids"]),
                     jnp.asarray(batch["input_mask"]))
    packed = pack_batch(batch, 48, row_multiple=4)
    assert packed["input_ids"].shape[0] % 4 == 0 and packed["input_ids"].shape[1] == 48
    assert packed["input_ids"].shape[0] < len(batch["length"])  # fewer rows than examples
    np.testing.assert_array_equal(packed["label"], batch["label"])  # example order kept
    logits = model(jnp.asarray(packed["input_ids"]), jnp.asarray(packed["segment_ids"]),
                   packed_attention_mask(jnp.asarray(packed["example_ids"])),
                   position_ids=jnp.asarray(packed["position_ids"]),
                   cls_positions=jnp.asarray(packed["cls_index"]))
    np.testing.assert_allclose(np.asarray(logits), np.asarray(unpacked), atol=1e-5, rtol=1e-5)
