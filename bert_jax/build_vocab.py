"""Builds a WordPiece vocab.txt or a SentencePiece model from text files.

    python -m bert_jax.build_vocab --input_file=corpus.txt --vocab_size=30522 \\
        --type=wordpiece --output=vocab.txt
    python -m bert_jax.build_vocab --input_file='wiki/*.txt,books.txt' --vocab_size=32000 \\
        --type=sentencepiece --spm_model_type=unigram --output=out/spm

What each output holds: bert_jax/tokenization/vocab_training.py.
"""
from collections.abc import Sequence

from absl import app, flags, logging

from bert_jax.tokenization.vocab_training import train_sentencepiece, train_wordpiece_vocab


def _define_flags() -> None:
    # Defined only when run as a program: importing this module (tests, other
    # tools) must not claim flag names such as --input_file.
    flags.DEFINE_string("input_file", None, "Comma-separated text files or globs.",
                        required=True)
    flags.DEFINE_integer("vocab_size", None, "Vocabulary size, special tokens included.",
                         required=True)
    flags.DEFINE_enum("type", "wordpiece", ["wordpiece", "sentencepiece"], "What to build.")
    flags.DEFINE_string("output", None,
                        "vocab.txt path (wordpiece) or model prefix (sentencepiece).",
                        required=True)
    flags.DEFINE_bool("do_lower_case", True, "Lower-case (and, for wordpiece, strip accents).")
    flags.DEFINE_enum("spm_model_type", "unigram", ["unigram", "bpe"], "SentencePiece algorithm.")
    flags.DEFINE_integer("spm_input_sentence_size", 0,
                         "SentencePiece: train on this many sampled sentences (0: all).")
    flags.DEFINE_bool("overwrite", False, "Replace existing output files.")


def main(argv: Sequence[str]) -> None:
    """Builds the vocabulary the flags describe."""
    del argv  # all input comes from flags
    FLAGS = flags.FLAGS
    if FLAGS.type == "wordpiece":
        path = train_wordpiece_vocab(
            FLAGS.input_file, FLAGS.vocab_size, FLAGS.do_lower_case, FLAGS.output,
            overwrite=FLAGS.overwrite)
    else:
        path = train_sentencepiece(
            FLAGS.input_file, FLAGS.vocab_size, FLAGS.do_lower_case, FLAGS.output,
            model_type=FLAGS.spm_model_type, input_sentence_size=FLAGS.spm_input_sentence_size,
            overwrite=FLAGS.overwrite)
    logging.info("wrote %s", path)


if __name__ == "__main__":
    _define_flags()
    app.run(main)
