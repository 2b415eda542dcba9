"""Per-token hidden states of a BERT checkpoint, as google-research/bert's extract_features.py.

    python -m bert_jax.extract_features --checkpoint DIR --input_file in.txt \
        --output_file out.jsonl --layers=-1,-2,-3,-4 --max_seq_length 128 \
        [--vocab_file V] [--nodo_lower_case] [--batch_size 8] \
        [--checkpoint_format bert_jax|hf|tf_v1] [--overwrite]

Each input line is `text_a` or `text_a ||| text_b`. Each output line is the JSON
object G-BERT writes for it, with the same keys in the same order:

    {"linex_index": 0, "features": [
        {"token": "[CLS]", "layers": [{"index": -1, "values": [0.123456, ...]}, ...]},
        ...]}

one feature per real token ([CLS] and [SEP] included), each requested layer's
vector rounded to 6 decimals. Layer indices index the encoder layers as a
Python list, as G-BERT's `get_all_encoder_layers()[index]`: -1 is the last
layer, -num_layers (or 0) the first; the embeddings output is not one of them.
As in G-BERT, a blank line is an example too ([CLS] [SEP]), so `linex_index`
is always the line's 0-based number.

The checkpoint may be in any format `bert_jax.convert` reads. Python API:
`extract_features(model, tokenizer, lines, layers, ...)` yields the objects.
"""
from __future__ import annotations

import functools
import itertools
import json
import os
import re
import sys
from typing import Iterable, Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags
from flax import nnx

from bert_jax.checkpoints import INPUT_FORMATS, load_model
from bert_jax.fileio.atomic_output import atomic_file, check_writable
from bert_jax.model.encoder import BertModel
from bert_jax.tokenization import FullTokenizer

# G-BERT's read_examples: the greedy first group splits a line with several
# separators at the last one.
_PAIR = re.compile(r"^(.*) \|\|\| (.*)$")
DECIMALS = 6  # G-BERT's round(float(x), 6)


def parse_line(line: str) -> tuple[str, str | None]:
    """(text_a, text_b or None) of one input line, as G-BERT's read_examples."""
    line = line.strip()
    match = _PAIR.match(line)
    return (line, None) if match is None else (match.group(1), match.group(2))


def truncate_seq_pair(tokens_a: list[str], tokens_b: list[str], max_length: int) -> None:
    """Pops tokens off the end of the longer list until the pair has `max_length` (in place).

    G-BERT's _truncate_seq_pair: on a tie, `tokens_b` gives way.
    """
    while len(tokens_a) + len(tokens_b) > max_length:
        (tokens_a if len(tokens_a) > len(tokens_b) else tokens_b).pop()


def encode_line(tokenizer: FullTokenizer, line: str, max_seq_length: int
                ) -> tuple[list[str], list[int]]:
    """(tokens, segment ids) of one input line: `[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]`.

    A pair is truncated to max_seq_length - 3 tokens, longer side first, a
    single text to max_seq_length - 2, as in G-BERT.
    """
    text_a, text_b = parse_line(line)
    tokens_a = tokenizer.tokenize(text_a)
    # A text_b with no tokens makes a single-text example, as in G-BERT.
    tokens_b = tokenizer.tokenize(text_b) if text_b else []
    if tokens_b:
        truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)
    else:
        tokens_a = tokens_a[:max_seq_length - 2]
    tokens = ["[CLS]", *tokens_a, "[SEP]"]
    segment_ids = [0] * len(tokens)
    if tokens_b:
        tokens += [*tokens_b, "[SEP]"]
        segment_ids += [1] * (len(tokens_b) + 1)
    return tokens, segment_ids


def hidden_state_positions(layers: Sequence[int], num_layers: int) -> tuple[int, ...]:
    """Where each encoder layer index sits in BertOutput.hidden_states (0 = embeddings)."""
    if not layers:
        raise ValueError("--layers is empty: name at least one layer, e.g. --layers=-1")
    for index in layers:
        if not -num_layers <= index < num_layers:
            raise ValueError(
                f"--layers: index {index} is out of range for a model with {num_layers} encoder "
                f"layers (use {-num_layers}..{num_layers - 1}; -1 is the last layer)")
    return tuple(index % num_layers + 1 for index in layers)


def _make_forward(model: BertModel, positions: tuple[int, ...]):
    """fn(input_ids, segment_ids, input_mask) -> float32 [batch, len(positions), length, hidden]."""
    graphdef, state = nnx.split(model)

    @jax.jit
    def forward(state, input_ids, segment_ids, input_mask):
        out = nnx.merge(graphdef, state)(input_ids, segment_ids, input_mask,
                                         output_hidden_states=True)
        return jnp.stack([out.hidden_states[p] for p in positions], axis=1).astype(jnp.float32)

    return functools.partial(forward, state)


def _line_object(index: int, tokens: list[str], layers: Sequence[int], values: np.ndarray) -> dict:
    # values: [len(layers), length, hidden]. tolist() gives Python floats of
    # the float32 values, which is what G-BERT rounds.
    vectors = values[:, :len(tokens)].tolist()
    return {"linex_index": index, "features": [
        {"token": token, "layers": [
            {"index": layer, "values": [round(x, DECIMALS) for x in vectors[j][i]]}
            for j, layer in enumerate(layers)]}
        for i, token in enumerate(tokens)]}


def extract_features(model: BertModel, tokenizer: FullTokenizer, lines: Iterable[str],
                     layers: Sequence[int] = (-1, -2, -3, -4), max_seq_length: int = 128,
                     batch_size: int = 8) -> Iterator[dict]:
    """Yields G-BERT's output object for each of `lines`, in order, lazily.

    lines: any iterable of text lines (a list, an open file); each is
      `text_a` or `text_a ||| text_b`.
    layers: encoder layer indices, -1 the last; each output vector lists them
      in this order under their given index.
    Arguments are checked here, before any line is read. The forward pass is
    compiled once: every batch, the last one padded, has shape
    [batch_size, max_seq_length].
    """
    if not 3 <= max_seq_length <= model.config.max_position_embeddings:
        raise ValueError(f"--max_seq_length={max_seq_length} must be in 3.."
                         f"{model.config.max_position_embeddings} (the model's positions)")
    if batch_size < 1:
        raise ValueError(f"--batch_size={batch_size} must be positive")
    positions = hidden_state_positions(layers, model.config.num_hidden_layers)
    forward = _make_forward(model, positions)
    return _generate(forward, tokenizer, iter(lines), tuple(layers), max_seq_length, batch_size)


def _generate(forward, tokenizer, lines, layers, max_seq_length, batch_size):
    index = 0
    pending = None
    while batch := [encode_line(tokenizer, line, max_seq_length)
                    for line in itertools.islice(lines, batch_size)]:
        input_ids, segment_ids, input_mask = (
            np.zeros((batch_size, max_seq_length), np.int32) for _ in range(3))
        for row, (tokens, segments) in enumerate(batch):
            input_ids[row, :len(tokens)] = tokenizer.convert_tokens_to_ids(tokens)
            segment_ids[row, :len(tokens)] = segments
            input_mask[row, :len(tokens)] = 1
        # Dispatch is asynchronous: the device runs this batch while the host
        # formats the previous one.
        values = forward(input_ids, segment_ids, input_mask)
        if pending is not None:
            yield from _format(*pending, layers, index)
            index += len(pending[0])
        pending = (batch, values)
    if pending is not None:
        yield from _format(*pending, layers, index)


def _format(batch, values, layers, first_index):
    values = np.asarray(values)
    for row, (tokens, _) in enumerate(batch):
        yield _line_object(first_index + row, tokens, layers, values[row])


def checkpoint_vocab(checkpoint: str) -> str | None:
    """The vocab.txt beside a checkpoint (in its folder, or its prefix's folder), if any."""
    folder = checkpoint if os.path.isdir(checkpoint) else os.path.dirname(checkpoint)
    vocab = os.path.join(folder, "vocab.txt")
    return vocab if os.path.isfile(vocab) else None


def read_lines(path: str) -> Iterator[str]:
    """The lines of a UTF-8 file, split at "\\n" only (as G-BERT's GFile.readline)."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{path}:{number}: not UTF-8 text ({e.reason})") from None


def extract_features_to_file(checkpoint: str, input_file: str, output_file: str,
                             layers: Sequence[int] = (-1, -2, -3, -4), *,
                             vocab_file: str | None = None, do_lower_case: bool = True,
                             max_seq_length: int = 128, batch_size: int = 8,
                             checkpoint_format: str | None = None,
                             overwrite: bool = False) -> int:
    """Writes the features of `input_file`'s lines to `output_file`; returns the line count.

    The output appears only when complete (temporary file, then rename); an
    existing one is replaced only with `overwrite`. `vocab_file` defaults to
    the checkpoint's own vocab.txt.
    """
    if not os.path.isfile(input_file):
        raise FileNotFoundError(f"--input_file not found: {input_file}")
    if not os.path.exists(checkpoint) and not os.path.exists(checkpoint + ".index"):
        raise FileNotFoundError(f"--checkpoint not found: {checkpoint}")
    vocab_file = vocab_file or checkpoint_vocab(checkpoint)
    if vocab_file is None:
        raise FileNotFoundError(f"--checkpoint {checkpoint} has no vocab.txt: pass --vocab_file")
    if not os.path.isfile(vocab_file):
        raise FileNotFoundError(f"--vocab_file not found: {vocab_file}")
    check_writable(os.path.abspath(output_file), overwrite)  # before the slow model load
    tokenizer = FullTokenizer(vocab_file, do_lower_case=do_lower_case)
    model = load_model(checkpoint, BertModel, fmt=checkpoint_format)
    objects = extract_features(model, tokenizer, read_lines(input_file), layers, max_seq_length,
                               batch_size)
    count = 0
    with atomic_file(output_file, overwrite=overwrite) as out:
        for count, obj in enumerate(objects, 1):
            out.write(json.dumps(obj) + "\n")
    return count


FLAGS = flags.FLAGS


def _define_flags() -> None:
    flags.DEFINE_string("checkpoint", None, "BERT checkpoint: a bert_jax or Hugging Face folder, "
                        "or a google-research/bert checkpoint (folder or prefix).")
    flags.DEFINE_enum("checkpoint_format", None, INPUT_FORMATS,
                      "Format of --checkpoint (default: detect it).")
    flags.DEFINE_string("input_file", None, "Text, one example a line: `text_a` or "
                        "`text_a ||| text_b`.")
    flags.DEFINE_string("output_file", None, "JSON lines to write.")
    flags.DEFINE_list("layers", ["-1", "-2", "-3", "-4"],
                      "Encoder layers to output, comma-separated; -1 is the last.")
    flags.DEFINE_integer("max_seq_length", 128, "Tokens per example after WordPiece, [CLS] and "
                         "[SEP] included; longer examples are truncated.")
    flags.DEFINE_bool("do_lower_case", True, "Lower-case the input (uncased models).")
    flags.DEFINE_integer("batch_size", 8, "Examples per forward pass.")
    flags.DEFINE_string("vocab_file", None, "WordPiece vocab.txt (default: the checkpoint's "
                        "own vocab.txt).")
    flags.DEFINE_bool("overwrite", False, "Replace an existing --output_file.")


def main(argv: Sequence[str]) -> None:
    """CLI entry point."""
    del argv
    for name in ("checkpoint", "input_file", "output_file"):
        if not getattr(FLAGS, name):
            raise app.UsageError(f"--{name} is required")
    try:
        layers = [int(x) for x in FLAGS.layers]
    except ValueError:
        raise app.UsageError(f"--layers={','.join(FLAGS.layers)} is not a comma-separated list "
                             "of integers") from None
    count = extract_features_to_file(
        FLAGS.checkpoint, FLAGS.input_file, FLAGS.output_file, layers,
        vocab_file=FLAGS.vocab_file, do_lower_case=FLAGS.do_lower_case,
        max_seq_length=FLAGS.max_seq_length, batch_size=FLAGS.batch_size,
        checkpoint_format=FLAGS.checkpoint_format, overwrite=FLAGS.overwrite)
    print(f"wrote the features of {count} lines to {FLAGS.output_file}", file=sys.stderr)


if __name__ == "__main__":
    _define_flags()
    app.run(main)
