"""The pretraining TFRecord format of google-research/bert.

One `tf.train.Example` per instance. Our files and google-research/bert's are
interchangeable, so the names, dtypes and shapes below are exactly those of its
`create_pretraining_data.py` (writer) and `run_pretraining.py` (reader).
Every int feature is int64 and zero padded; `masked_lm_weights` is float32
(1.0 for a real prediction, 0.0 for padding).

Unmasked files for dynamic masking hold only four of them
(`input_ids`, `input_mask`, `segment_ids`, `next_sentence_labels`).
"""

# name -> (length key, dtype); length key is "seq" (max_seq_length),
# "pred" (max_predictions_per_seq) or 1. Listed in the order the records of
# google-research/bert's files hold them (its protobuf's map order): readers
# parse any order, and our writer, which writes this order, then makes files
# byte-identical to google-research/bert's.
MASKED_FEATURES = {
    "masked_lm_ids": ("pred", "int64"),
    "input_mask": ("seq", "int64"),
    "segment_ids": ("seq", "int64"),
    "input_ids": ("seq", "int64"),
    "masked_lm_positions": ("pred", "int64"),
    "masked_lm_weights": ("pred", "float32"),
    "next_sentence_labels": (1, "int64"),
}

UNMASKED_FEATURES = {
    name: MASKED_FEATURES[name]
    for name in ("input_ids", "input_mask", "segment_ids", "next_sentence_labels")
}

# next_sentence_labels: 0 = B really follows A, 1 = B is a random span.
IS_NEXT = 0
IS_RANDOM_NEXT = 1


def feature_lengths(features: dict, max_seq_length: int, max_predictions_per_seq: int) -> dict:
    """Returns {name: (length, dtype)} with the symbolic lengths resolved."""
    sizes = {"seq": max_seq_length, "pred": max_predictions_per_seq, 1: 1}
    return {name: (sizes[length], dtype) for name, (length, dtype) in features.items()}
