"""Trains a WordPiece vocab.txt or a SentencePiece model on text files.

The library behind `python -m bert_jax.build_vocab`. Input is
create_pretraining_data's format: one sentence per line, blank lines between
documents (skipped here). --input_file takes comma-separated paths or
globs. --do_lower_case is on by default, as in google-research/bert; pass
--nodo_lower_case for a cased vocabulary, and load it with the same setting.

Outputs:
  wordpiece      --output is the vocab.txt: [PAD] [UNK] [CLS] [SEP] [MASK] at
                 ids 0-4, then the learned pieces ("##" marks continuations).
  sentencepiece  --output is a prefix: PREFIX.model and PREFIX.vocab (a
                 trailing ".model" is dropped from it). The same five tokens
                 sit at ids 0-4: [PAD] and [UNK] as SentencePiece's pad and unk
                 pieces, the other three as control symbols (never produced
                 from text); no BOS/EOS.
Each file is written under a temporary name and renamed into place, so a
crash never leaves a half-written vocabulary; an existing output is an error
unless --overwrite.
"""

import os
import pathlib
import tempfile
from collections.abc import Iterator, Sequence

import sentencepiece as spm
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from bert_jax.fileio.file_patterns import expand_file_patterns
from bert_jax.tokenization.basic import BasicTokenizer
from bert_jax.tokenization.vocab import SPECIAL_TOKENS
from bert_jax.tokenization.wordpiece import MAX_INPUT_CHARS_PER_WORD


def _read_lines(files: Sequence[str], lower: bool) -> Iterator[str]:
    """Yields the non-blank lines of `files`, lower-cased if `lower`."""
    for path in files:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line:
                    yield line.lower() if lower else line


def _check_new(path: pathlib.Path, overwrite: bool) -> None:
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; pass --overwrite (overwrite=True) to replace it")


def train_wordpiece_vocab(
    files: str | Sequence[str],
    vocab_size: int,
    do_lower_case: bool,
    output: str | os.PathLike,
    overwrite: bool = False,
) -> pathlib.Path:
    """Trains a WordPiece vocabulary with HF tokenizers and writes a BERT vocab.txt.

    The trainer sees exactly the words FullTokenizer will see: each line goes
    through our BasicTokenizer (HF's BertNormalizer/BertPreTokenizer differ
    from G-BERT's rules, see tokenization/basic.py) and the trainer only splits
    on the spaces between those words. Returns the path written.
    """
    output = pathlib.Path(output)
    _check_new(output, overwrite)
    files = expand_file_patterns(files)
    basic = BasicTokenizer(do_lower_case)
    # Lower-casing is BasicTokenizer's job here: it lower-cases before it
    # strips accents, and per word.
    words = (" ".join(basic.tokenize(line)) for line in _read_lines(files, lower=False))
    tokenizer = Tokenizer(
        models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD)
    )
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        continuing_subword_prefix="##",
        show_progress=False,
    )
    tokenizer.train_from_iterator(words, trainer)
    vocab = tokenizer.get_vocab()
    tokens = sorted(vocab, key=vocab.__getitem__)
    if tuple(tokens[: len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
        raise RuntimeError(f"WordPieceTrainer did not put {SPECIAL_TOKENS} first: {tokens[:5]}")
    output.parent.mkdir(parents=True, exist_ok=True)
    temp = output.with_name(f".{output.name}.tmp{os.getpid()}")
    try:
        temp.write_text("".join(token + "\n" for token in tokens), encoding="utf-8")
        _check_new(output, overwrite)  # again: training can take hours
        os.replace(temp, output)
    finally:
        temp.unlink(missing_ok=True)
    return output


def train_sentencepiece(
    files: str | Sequence[str],
    vocab_size: int,
    do_lower_case: bool,
    output: str | os.PathLike,
    model_type: str = "unigram",
    input_sentence_size: int = 0,
    overwrite: bool = False,
) -> pathlib.Path:
    """Trains a SentencePiece model (unigram or bpe) with BERT's special tokens at ids 0-4.

    Writes OUTPUT.model and OUTPUT.vocab (`output` is a prefix; a trailing
    ".model" is dropped). `input_sentence_size` > 0 trains on that many
    sentences sampled from the input, which bounds memory on large corpora.
    Returns the .model path.
    """
    prefix = pathlib.Path(output)
    if prefix.suffix == ".model":
        prefix = prefix.with_suffix("")
    targets = [prefix.with_name(prefix.name + ext) for ext in (".model", ".vocab")]
    for target in targets:
        _check_new(target, overwrite)
    files = expand_file_patterns(files)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=prefix.parent, prefix=f".{prefix.name}.tmp") as temp:
        spm.SentencePieceTrainer.train(
            sentence_iterator=_read_lines(files, lower=do_lower_case),
            model_prefix=os.path.join(temp, "spm"),
            vocab_size=vocab_size,
            model_type=model_type,
            pad_id=0,
            pad_piece="[PAD]",
            unk_id=1,
            unk_piece="[UNK]",
            bos_id=-1,
            eos_id=-1,
            # Control symbols take the next free ids, in this order: 2, 3, 4.
            control_symbols=list(SPECIAL_TOKENS[2:]),
            input_sentence_size=input_sentence_size,
            shuffle_input_sentence=True,
            minloglevel=1,
        )
        for target in targets:
            _check_new(target, overwrite)
        for ext, target in zip((".model", ".vocab"), targets):
            os.replace(os.path.join(temp, "spm" + ext), target)
    return targets[0]
