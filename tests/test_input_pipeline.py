"""tf.data pretraining pipeline, dynamic masking and iterator checkpointing."""
import numpy as np
import orbax.checkpoint as ocp
import pytest
import tensorflow as tf

from bert_jax.checkpoints.iterator_state import IteratorRestore, IteratorSave
from bert_jax.pretraining import dynamic_masking, record_spec
from bert_jax.pretraining.input_pipeline import make_pretraining_dataset

SEQ, PRED, VOCAB = 16, 4, 200
SPECIAL = dynamic_masking.SpecialIds(cls=1, sep=2, mask=3, pad=0)
CONTINUATION = np.arange(VOCAB) >= 150  # ids 150.. play the "##" pieces


def _instance(index, rng, masked=True):
    """A plausible instance; input_ids[1] == index identifies it."""
    length = int(rng.integers(8, SEQ + 1))
    body = list(rng.integers(10, 150, length - 5))
    ids = [SPECIAL.cls, 10 + index] + body + [SPECIAL.sep, 11, SPECIAL.sep]
    ids = np.array(ids[:length] + [0] * (SEQ - length))
    instance = {
        "input_ids": ids,
        "input_mask": (np.arange(SEQ) < length).astype(int),
        "segment_ids": np.zeros(SEQ, int),
        "next_sentence_labels": [index % 2],
    }
    if masked:
        instance.update(
            masked_lm_positions=[2, 3, 0, 0],
            masked_lm_ids=[ids[2], ids[3], 0, 0],
            masked_lm_weights=[1.0, 1.0, 0.0, 0.0],
        )
        instance["input_ids"] = np.where(np.isin(np.arange(SEQ), [2, 3]), SPECIAL.mask, ids)
    return instance


def _write(path, instances):
    """Writes tf.train.Examples with exactly google-research/bert's feature spec."""
    masked = "masked_lm_ids" in instances[0]
    spec = record_spec.MASKED_FEATURES if masked else record_spec.UNMASKED_FEATURES
    with tf.io.TFRecordWriter(str(path)) as writer:
        for instance in instances:
            feature = {}
            for name, (_, dtype) in spec.items():
                values = np.asarray(instance[name]).tolist()
                if dtype == "float32":
                    feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
                else:
                    feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
            example = tf.train.Example(features=tf.train.Features(feature=feature))
            writer.write(example.SerializeToString())
    return str(path)


def _files(tmp_path, num_files, per_file, masked=True):
    rng = np.random.default_rng(0)
    return [
        _write(
            tmp_path / f"part-{f:02d}.tfrecord",
            [_instance(f * per_file + i, rng, masked) for i in range(per_file)],
        )
        for f in range(num_files)
    ]


def _dataset(patterns, **kwargs):
    args = dict(global_batch_size=4, max_seq_length=SEQ, max_predictions_per_seq=PRED, seed=0)
    return make_pretraining_dataset(patterns, **{**args, **kwargs})


def _take(dataset_or_iterator, n):
    it = dataset_or_iterator
    if isinstance(it, tf.data.Dataset):
        it = iter(it)
    return [{k: np.asarray(v) for k, v in next(it).items()} for _ in range(n)]


def _assert_same_batches(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            np.testing.assert_array_equal(x[k], y[k], err_msg=k)


def _originals(batch):
    """input_ids with the masked tokens written back."""
    ids = batch["input_ids"].copy()
    rows, slots = np.nonzero(batch["masked_lm_weights"])
    ids[rows, batch["masked_lm_positions"][rows, slots]] = batch["masked_lm_ids"][rows, slots]
    return ids


def _dynamic(**kwargs):
    return dict(dynamic_masking=True, vocab_size=VOCAB, special_ids=SPECIAL, **kwargs)


def test_eval_reads_every_example_in_order_and_pads_the_last_batch(tmp_path):
    files = _files(tmp_path, num_files=2, per_file=5)
    dataset = _dataset(f"{files[0]},{tmp_path}/part-01*", is_training=False)
    batches = list(dataset.as_numpy_iterator())
    assert len(batches) == 3
    assert batches[0]["input_ids"].dtype == np.int32
    assert batches[0]["masked_lm_weights"].dtype == np.float32
    assert batches[0]["next_sentence_labels"].shape == (4,)
    np.testing.assert_array_equal(
        np.concatenate([b["input_ids"][:, 1] for b in batches]), list(range(10, 20)) + [0, 0]
    )
    np.testing.assert_array_equal(batches[2]["is_real"], [1, 1, 0, 0])
    np.testing.assert_array_equal(batches[2]["masked_lm_weights"][2:], 0.0)
    np.testing.assert_array_equal(batches[0]["masked_lm_positions"][0], [2, 3, 0, 0])
    np.testing.assert_array_equal(batches[0]["next_sentence_labels"], [0, 1, 0, 1])


def test_bad_patterns_and_batch_size_fail_loudly(tmp_path):
    files = _files(tmp_path, num_files=1, per_file=4)
    with pytest.raises(FileNotFoundError, match="nope-"):
        _dataset(f"{files[0]},{tmp_path}/nope-*")
    with pytest.raises(ValueError, match="train.batch_size"):
        _dataset(files, global_batch_size=6, process_index=0, process_count=4)
    instance = _instance(0, np.random.default_rng(0), masked=False)
    unmasked = _write(tmp_path / "unmasked.tfrecord", [instance])
    with pytest.raises(ValueError, match="dynamic_masking"):
        _dataset(unmasked)


def _eval_ids(files, process_index, process_count):
    batches = _dataset(
        files, is_training=False, process_index=process_index, process_count=process_count
    ).as_numpy_iterator()
    # global batch 4 over the hosts -> per-host batches of 4 // process_count.
    return [(b["input_ids"][:, 1], b["is_real"]) for b in batches]


# 3 files: hosts read files {0, 2} and {1} (10 and 5 examples); 1 file: hosts
# read every other example (8 and 7).
@pytest.mark.parametrize("num_files, per_file, num_steps", [(3, 5, 5), (1, 15, 4)])
def test_hosts_read_disjoint_shares_and_step_together(tmp_path, num_files, per_file, num_steps):
    files = _files(tmp_path, num_files=num_files, per_file=per_file)
    per_host = [_eval_ids(files, i, 2) for i in range(2)]
    # The same number of eval steps on every host, the short one padded.
    assert len(per_host[0]) == len(per_host[1]) == num_steps
    seen = np.concatenate([ids[real == 1] for host in per_host for ids, real in host])
    assert sorted(seen.tolist()) == list(range(10, 25))
    assert all(len(ids) == 2 for host in per_host for ids, _ in host)  # per-host batch = 4 / 2


def test_training_is_deterministic_per_seed_and_repeats(tmp_path):
    files = _files(tmp_path, num_files=3, per_file=5)
    first = _take(_dataset(files, shuffle_buffer_size=8), 10)  # 40 examples: > 2 epochs
    _assert_same_batches(first, _take(_dataset(files, shuffle_buffer_size=8), 10))
    other = _take(_dataset(files, shuffle_buffer_size=8, seed=1), 10)
    assert any(not np.array_equal(a["input_ids"], b["input_ids"]) for a, b in zip(first, other))
    ids = np.concatenate([b["input_ids"][:, 1] for b in first])
    assert set(ids.tolist()) == set(range(10, 25))


def _mask(ids, prob=0.15, seed=0, whole_word=False, pred=PRED):
    ids = tf.constant(np.atleast_2d(ids), tf.int32)
    return {
        k: v.numpy()
        for k, v in dynamic_masking.mask_batch(
            {"input_ids": ids, "input_mask": tf.cast(ids != SPECIAL.pad, tf.int32)},
            tf.constant([seed, 7], tf.int64),
            max_predictions_per_seq=pred,
            masked_lm_prob=prob,
            vocab_size=VOCAB,
            special_ids=SPECIAL,
            continuation=tf.constant(CONTINUATION) if whole_word else None,
        ).items()
    }


def test_dynamic_masking_follows_google_bert_rules():
    rng = np.random.default_rng(0)
    batch, seq = 4000, 24
    lengths = rng.integers(4, seq + 1, batch)
    ids = rng.integers(10, 150, (batch, seq))
    ids[:, 0] = SPECIAL.cls
    ids[np.arange(batch), lengths - 1] = SPECIAL.sep
    ids[np.arange(seq)[None, :] >= lengths[:, None]] = SPECIAL.pad
    out = _mask(ids, pred=3)

    # lengths count [CLS] and [SEP], as in G-BERT.
    num_to_predict = np.minimum(3, np.maximum(1, np.round(lengths * 0.15)))
    np.testing.assert_array_equal(out["masked_lm_weights"].sum(1), num_to_predict)
    real = out["masked_lm_weights"] > 0
    pos = out["masked_lm_positions"]
    # Sorted, then padding.
    assert np.all(np.diff(np.where(real, pos, seq + np.arange(3)), axis=1) > 0)
    np.testing.assert_array_equal(pos[~real], 0)
    originals = np.take_along_axis(ids, pos, 1)
    assert not np.isin(originals[real], [SPECIAL.cls, SPECIAL.sep, SPECIAL.pad]).any()
    np.testing.assert_array_equal(out["masked_lm_ids"], np.where(real, originals, 0))
    # Only the predicted positions changed.
    changed = np.zeros_like(ids, bool)
    np.put_along_axis(changed, pos, real, 1)
    np.testing.assert_array_equal(out["input_ids"][~changed], ids[~changed])
    # 80% [MASK], 10% kept, 10% random (which keeps the token 1 time in 200).
    new = np.take_along_axis(out["input_ids"], pos, 1)[real]
    np.testing.assert_allclose(np.mean(new == SPECIAL.mask), 0.8, atol=0.015)
    np.testing.assert_allclose(np.mean(new == originals[real]), 0.1 + 0.1 / VOCAB, atol=0.01)


def test_whole_word_masking_skips_words_that_do_not_fit_and_masks_words_whole():
    # [CLS] a ##b ##c d e [SEP]: 7 tokens, words of 3, 1, 1 pieces.
    ids = [SPECIAL.cls, 20, 150, 151, 30, 40, SPECIAL.sep, 0]
    for seed in range(20):
        # round(7 * 0.3) = 2: the 3-piece word never fits, G-BERT skips it and
        # takes the two single words whatever the shuffled order.
        out = _mask(ids, prob=0.3, seed=seed, whole_word=True)
        np.testing.assert_array_equal(out["masked_lm_positions"][0], [4, 5, 0, 0])
    states = set()
    for seed in range(40):
        out = _mask(ids, prob=0.43, seed=seed, whole_word=True)  # round(3.01) = 3 pieces
        positions = out["masked_lm_positions"][0][out["masked_lm_weights"][0] > 0].tolist()
        assert positions in ([1, 2, 3], [4, 5])  # the long word fits only when drawn first
        if positions == [1, 2, 3]:
            masked = out["input_ids"][0][1:4] == SPECIAL.mask
            assert masked.all() or not masked.any()  # one 80/10/10 draw per word
            states.add(bool(masked.all()))
    assert states == {True, False}


def test_remasking_restores_originals_then_masks_fresh(tmp_path):
    files = _files(tmp_path, num_files=1, per_file=8)
    static = _take(_dataset(files, is_training=False), 2)
    dynamic = _take(_dataset(files, is_training=False, **_dynamic()), 2)
    for s, d in zip(static, dynamic):
        originals = _originals(s)
        np.testing.assert_array_equal(_originals(d), originals)
        predicted = np.take_along_axis(originals, d["masked_lm_positions"], 1)
        expected = np.where(d["masked_lm_weights"] > 0, predicted, 0)
        np.testing.assert_array_equal(d["masked_lm_ids"], expected)
        assert not np.array_equal(d["masked_lm_positions"], s["masked_lm_positions"])


def test_dynamic_masks_are_fresh_each_epoch_and_reproducible(tmp_path):
    files = _files(tmp_path, num_files=1, per_file=4, masked=False)
    batches = _take(_dataset(files, shuffle_buffer_size=1, **_dynamic()), 2)  # 2 epochs, same order
    np.testing.assert_array_equal(_originals(batches[0]), _originals(batches[1]))
    assert not np.array_equal(batches[0]["masked_lm_positions"], batches[1]["masked_lm_positions"])
    _assert_same_batches(batches, _take(_dataset(files, shuffle_buffer_size=1, **_dynamic()), 2))


@pytest.mark.parametrize("masking", ["static", "dynamic", "whole_word"])
def test_iterator_position_survives_checkpoint_restore(tmp_path, masking):
    masked = masking == "static"
    files = _files(tmp_path, num_files=3, per_file=6, masked=masked)
    kwargs = {} if masked else _dynamic(
        whole_word_mask=masking == "whole_word", continuation_ids=CONTINUATION
    )
    iterator = _dataset(files, shuffle_buffer_size=5, **kwargs).as_numpy_iterator()
    _take(iterator, 7)
    with ocp.CheckpointManager(tmp_path / "ckpt") as manager:
        manager.save(7, args=ocp.args.Composite(data=IteratorSave(iterator)))
        manager.wait_until_finished()
    expected = _take(iterator, 6)

    fresh = _dataset(files, shuffle_buffer_size=5, **kwargs).as_numpy_iterator()
    with ocp.CheckpointManager(tmp_path / "ckpt") as manager:
        manager.restore(7, args=ocp.args.Composite(data=IteratorRestore(fresh)))
    _assert_same_batches(_take(fresh, 6), expected)


def test_reads_google_bert_file(shared_data):
    path = str(shared_data / "google_bert" / "speeches_seq128.tfrecord")
    vocab = (shared_data / "google_bert" / "vocab.txt").read_text().splitlines()
    kwargs = dict(
        global_batch_size=64, max_seq_length=128, max_predictions_per_seq=20, seed=0,
        is_training=False,
    )
    static = _take(make_pretraining_dataset(path, **kwargs), 4)
    dynamic = _take(
        make_pretraining_dataset(
            path, dynamic_masking=True, vocab_size=len(vocab),
            special_ids=dynamic_masking.SpecialIds.from_vocab(vocab), **kwargs
        ),
        4,
    )
    for s, d in zip(static, dynamic):
        assert s["input_ids"].shape == (64, 128) and s["masked_lm_ids"].shape == (64, 20)
        assert s["input_ids"].max() < len(vocab)
        assert s["input_ids"][:, 0].tolist() == [vocab.index("[CLS]")] * 64
        lengths = s["input_mask"].sum(1)
        np.testing.assert_array_equal(s["input_mask"], np.arange(128)[None] < lengths[:, None])
        assert set(np.unique(s["masked_lm_weights"])) <= {0.0, 1.0}
        # Our re-masking predicts exactly as many tokens as create_pretraining_data.py did.
        np.testing.assert_array_equal(d["masked_lm_weights"].sum(1), s["masked_lm_weights"].sum(1))
        np.testing.assert_array_equal(d["segment_ids"], s["segment_ids"])


def test_whole_word_never_spans_sep():
    from bert_jax.pretraining.dynamic_masking import _word_index

    # [CLS] a ##b [SEP] ##c d [SEP] [PAD]: "##c" after [SEP] opens its own word.
    candidate = tf.constant([[False, True, True, False, True, True, False, False]])
    continuation = tf.constant([[False, False, True, False, True, False, False, False]])
    words = _word_index(candidate, continuation, 8).numpy()[0]
    assert list(words) == [8, 0, 0, 8, 1, 2, 8, 8]
