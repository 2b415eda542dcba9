"""Convert BERT checkpoints between Hugging Face, google-research/bert and bert_jax.

    python -m bert_jax.convert --input PATH --input_format {hf,tf_v1,bert_jax} \
        --output PATH --output_format {bert_jax,hf} [--vocab_file V] [--overwrite]

The readers and writers are bert_jax.checkpoints (read_checkpoint,
write_checkpoint, load_model).
"""
from __future__ import annotations

import sys

from absl import app, flags, logging

from bert_jax.checkpoints import INPUT_FORMATS, OUTPUT_FORMATS, read_checkpoint, write_checkpoint

FLAGS = flags.FLAGS


def _define_flags() -> None:
    # Defined only when run as a program, so that importing this module
    # registers no flags.
    flags.DEFINE_string("input", None, "Checkpoint to read (folder or TF prefix).")
    flags.DEFINE_enum("input_format", None, INPUT_FORMATS, "Format of --input.")
    flags.DEFINE_string("output", None, "Folder to write.")
    flags.DEFINE_enum("output_format", "bert_jax", OUTPUT_FORMATS, "Format of --output.")
    flags.DEFINE_string("vocab_file", None, "vocab.txt to store with the output (default: the "
                        "input's own vocab.txt, if it has one).")
    flags.DEFINE_bool("overwrite", False, "Replace an existing --output.")
    flags.DEFINE_bool("do_lower_case", None, "Record this casing with the output (default: the "
                      "input's tokenizer_config.json, if it has one).")


def main(argv):
    del argv
    for name in ("input", "input_format", "output"):
        if not getattr(FLAGS, name):
            raise app.UsageError(f"--{name} is required")
    read = read_checkpoint(FLAGS.input, FLAGS.input_format)
    for line in read.missing:
        logging.warning("%s", line)
    do_lower_case = read.do_lower_case
    if FLAGS["do_lower_case"].present:
        do_lower_case = FLAGS.do_lower_case
    if do_lower_case is None:
        logging.warning("%s does not record do_lower_case: no tokenizer_config.json written "
                        "(pass --do_lower_case or --nodo_lower_case)", FLAGS.input)
    write_checkpoint(FLAGS.output, FLAGS.output_format, read.config, read.params,
                     vocab_file=FLAGS.vocab_file or read.vocab_file, overwrite=FLAGS.overwrite,
                     do_lower_case=do_lower_case, task=read.task)
    head = f", head {read.task.architecture}" if read.task else ""
    print(f"wrote {FLAGS.output_format} checkpoint {FLAGS.output} ({len(read.params)} tensors, "
          f"{sum(v.size for v in read.params.values()):,} parameters{head})", file=sys.stderr)


if __name__ == "__main__":
    _define_flags()
    app.run(main)
