"""Creates BERT pretraining TFRecords from text, like google-research/bert's script.

    python -m bert_jax.create_pretraining_data \\
        --input_file='corpus/*.txt' --output_file=data/train.tfrecord \\
        --vocab_file=vocab.txt --do_lower_case --max_seq_length=128 \\
        --max_predictions_per_seq=20 --masked_lm_prob=0.15 --dupe_factor=10 \\
        --num_workers=4 --num_output_shards=16

Same flags and file format as google-research/bert's create_pretraining_data.py,
plus --spm_model, --num_workers, --num_output_shards, --overwrite, --unmasked,
--megabytes_per_shard and --tfds_*. What it does, and where it deliberately
differs from google-research/bert: bert_jax/pretraining/data_creation.py.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from absl import app, flags

from bert_jax.fileio import atomic_output
from bert_jax.pretraining.data_creation import (
    DEFAULT_MEGABYTES_PER_SHARD,
    create_pretraining_data,
    create_pretraining_data_from_tfds,
    format_summary,
    output_paths,
)
from bert_jax.tokenization import load_tokenizer


def _define_flags() -> None:
    flags.DEFINE_string(
        "input_file",
        None,
        "Input text files: comma-separated paths and/or globs. "
        "One sentence per line, blank lines between documents.",
    )
    flags.DEFINE_string("output_file", None, "Output TFRecord file(s), comma-separated.")
    flags.DEFINE_string("vocab_file", None, "WordPiece vocab.txt (or use --spm_model).")
    flags.DEFINE_string("spm_model", None, "SentencePiece model (instead of --vocab_file).")
    flags.DEFINE_bool("do_lower_case", True, "Lower-case the input (uncased models).")
    flags.DEFINE_bool(
        "do_whole_word_mask",
        False,
        "Mask whole words. Unlike G-BERT, the 80/10/10 choice is drawn once per word, "
        "not per piece (G-BERT issue #910).",
    )
    flags.DEFINE_integer("max_seq_length", 128, "Maximum sequence length.")
    flags.DEFINE_integer(
        "max_predictions_per_seq", 20, "Maximum masked LM predictions per sequence."
    )
    flags.DEFINE_integer("random_seed", 12345, "Random seed for data generation.")
    flags.DEFINE_integer(
        "dupe_factor", 10, "Number of times to duplicate the input data (with different masks)."
    )
    flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability.")
    flags.DEFINE_float(
        "short_seq_prob",
        0.1,
        "Probability of creating sequences shorter than the maximum length (drawn per document).",
    )
    flags.DEFINE_integer("num_workers", 1, "Processes making shards, this one included.")
    flags.DEFINE_integer(
        "num_output_shards",
        None,
        "Split the output over N files named from --output_file: NAME-0000i-of-0000N.EXT.",
    )
    flags.DEFINE_float(
        "megabytes_per_shard",
        DEFAULT_MEGABYTES_PER_SHARD,
        "Text per processing shard: bounds memory, and random next sentences come from the "
        "documents of the same shard. Part of the seed: changing it changes the output.",
    )
    flags.DEFINE_bool("overwrite", False, "Replace existing output files.")
    flags.DEFINE_bool(
        "unmasked",
        False,
        "Write only input_ids, input_mask, segment_ids, next_sentence_labels (dynamic masking).",
    )
    flags.DEFINE_string(
        "tfds_name", None, "Read this locally prepared TFDS text dataset instead of --input_file."
    )
    flags.DEFINE_string("tfds_split", "train", "TFDS split.")
    flags.DEFINE_string("tfds_text_key", "text", "TFDS feature holding the document text.")
    flags.DEFINE_string("tfds_data_dir", None, "TFDS data directory (default: TFDS's own).")
    flags.DEFINE_bool("progress", True, "Show a progress bar.")


def main(argv: Sequence[str]) -> None:
    """CLI entry point."""
    del argv
    f = flags.FLAGS
    if (f.input_file is None) == (f.tfds_name is None):
        raise app.UsageError("pass exactly one of --input_file or --tfds_name")
    if f.output_file is None:
        raise app.UsageError("--output_file is required")
    outputs = output_paths(f.output_file, f.num_output_shards)
    for path in outputs:  # fail before loading anything
        atomic_output.check_writable(os.path.abspath(path), f.overwrite)
    tokenizer = load_tokenizer(f.vocab_file, f.spm_model, f.do_lower_case)
    options = dict(
        max_seq_length=f.max_seq_length,
        max_predictions_per_seq=f.max_predictions_per_seq,
        masked_lm_prob=f.masked_lm_prob,
        short_seq_prob=f.short_seq_prob,
        dupe_factor=f.dupe_factor,
        random_seed=f.random_seed,
        do_whole_word_mask=f.do_whole_word_mask,
        unmasked=f.unmasked,
    )
    common = dict(
        num_workers=f.num_workers,
        megabytes_per_shard=f.megabytes_per_shard,
        overwrite=f.overwrite,
        progress=f.progress,
    )
    if f.tfds_name:
        summary = create_pretraining_data_from_tfds(
            f.tfds_name,
            f.tfds_split,
            outputs,
            tokenizer,
            f.tfds_text_key,
            f.tfds_data_dir,
            **common,
            **options,
        )
    else:
        summary = create_pretraining_data(f.input_file, outputs, tokenizer, **common, **options)
    print(format_summary(summary), flush=True)


if __name__ == "__main__":
    _define_flags()
    app.run(main)
