"""tfrecord_writer: our hand-encoded Examples and framing, checked against TensorFlow."""
import numpy as np
import pytest

from bert_jax.pretraining import tfrecord_writer

tf = pytest.importorskip("tensorflow")


def _features(n=64, seed=0):
    rng = np.random.default_rng(seed)
    feats = {
        "input_ids": rng.integers(0, 30522, (n, 16)),
        "input_mask": rng.integers(0, 2, (n, 16)),
        "masked_lm_weights": rng.integers(0, 2, (n, 4)).astype(np.float32),
        "next_sentence_labels": rng.integers(0, 2, (n, 1)),
    }
    # every varint length, 1 to 4 bytes, at both ends of each range
    feats["input_ids"][0, :10] = [0, 1, 127, 128, 16383, 16384, 2**21 - 1, 2**21, 2**28 - 1, 2**22]
    feats["masked_lm_weights"][1] = [0.5, -2.25, 1e-8, 3e38]
    return feats


def _reference_example(feats, i):
    feature = {}
    for name, values in feats.items():
        if values.dtype == np.float32:
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=values[i]))
        else:
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=values[i]))
    return tf.train.Example(features=tf.train.Features(feature=feature))


def test_examples_parse_to_the_same_protos_as_protobufs():
    feats = _features()
    buffer, offsets = tfrecord_writer.encode_tfrecords(feats)
    for i in range(len(offsets) - 1):
        data = buffer[offsets[i] + 12 : offsets[i + 1] - 4].tobytes()
        expected = _reference_example(feats, i)
        assert tf.train.Example.FromString(data) == expected
        assert len(data) == expected.ByteSize()


def test_framing_is_byte_identical_to_tf_record_writer(tmp_path):
    feats = _features()
    buffer, offsets = tfrecord_writer.encode_tfrecords(feats)
    reference = tmp_path / "reference.tfrecord"
    with tf.io.TFRecordWriter(str(reference)) as writer:
        for i in range(len(offsets) - 1):
            writer.write(buffer[offsets[i] + 12 : offsets[i + 1] - 4].tobytes())
    assert buffer.tobytes() == reference.read_bytes()


def test_tf_data_reads_and_parses_the_records(tmp_path):
    feats = _features(n=10)
    buffer, _ = tfrecord_writer.encode_tfrecords(feats)
    path = tmp_path / "x.tfrecord"
    path.write_bytes(buffer.tobytes())
    spec = {
        name: tf.io.FixedLenFeature([v.shape[1]], tf.float32 if v.dtype == np.float32 else tf.int64)
        for name, v in feats.items()
    }
    parsed = [tf.io.parse_single_example(r, spec) for r in tf.data.TFRecordDataset(str(path))]
    assert len(parsed) == 10
    for name, values in feats.items():
        np.testing.assert_array_equal(np.stack([p[name].numpy() for p in parsed]), values)


def test_int_values_out_of_range_are_rejected():
    with pytest.raises(ValueError, match="input_ids"):
        tfrecord_writer.encode_tfrecords({"input_ids": np.array([[1, -1]])})
    with pytest.raises(ValueError, match="input_ids"):
        tfrecord_writer.encode_tfrecords({"input_ids": np.array([[2**28]])})
