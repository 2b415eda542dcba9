"""Vocabulary loading and the token <-> id plumbing both tokenizers share."""

import abc
import os
import pathlib

import numpy as np

# BERT's special tokens. Vocabularies we build put them at ids 0-4 in this
# order; G-BERT's released vocab.txt files have [PAD]=0 and the rest at 100-103.
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def check_file(path: str | os.PathLike, what: str) -> pathlib.Path:
    """Returns `path` as a Path, or raises FileNotFoundError naming it."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} not found: {path}")
    return path


def load_vocab(vocab_file: str | os.PathLike) -> dict[str, int]:
    """Reads a BERT vocab.txt: one token per line, id = line index, in file order.

    As G-BERT's `load_vocab`, lines end at "\\n" only and each token is
    stripped of surrounding whitespace. Unlike G-BERT, which silently lets the
    later line win, a duplicate token raises ValueError with both line numbers.
    """
    path = check_file(vocab_file, "vocab file")
    with open(path, encoding="utf-8", newline="") as f:
        lines = f.read().split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last token starts no new one
    vocab = {}
    for index, line in enumerate(lines):
        token = line.strip()
        if token in vocab:
            raise ValueError(
                f"{path}:{index + 1}: duplicate token {token!r} "
                f"(already on line {vocab[token] + 1})"
            )
        vocab[token] = index
    return vocab


class Vocabulary(abc.ABC):
    """Token <-> id maps, special ids and the continuation mask of a tokenizer.

    Subclasses define `is_continuation(token)`, which must work before this
    class's __init__ runs.
    """

    def __init__(self, vocab: dict[str, int], source: str | os.PathLike):
        missing = [token for token in SPECIAL_TOKENS if token not in vocab]
        if missing:
            raise ValueError(
                f"{source} lacks the special tokens {' '.join(missing)}; "
                f"BERT needs all of {' '.join(SPECIAL_TOKENS)}"
            )
        self.vocab = vocab
        self.inv_vocab = {index: token for token, index in vocab.items()}
        # [vocab_size] bool, True for ids that continue the previous piece's
        # word: whole-word masking reads it instead of the strings.
        self.continuation_mask = np.zeros(max(self.inv_vocab) + 1, dtype=bool)
        for token, index in vocab.items():
            self.continuation_mask[index] = self.is_continuation(token)

    @abc.abstractmethod
    def is_continuation(self, token: str) -> bool:
        """True if `token` continues a word rather than starting one."""

    def convert_tokens_to_ids(self, tokens: list[str]) -> list[int]:
        """Maps tokens to ids; an unknown token raises KeyError, as in G-BERT."""
        return [self.vocab[token] for token in tokens]

    def convert_ids_to_tokens(self, ids) -> list[str]:
        """Maps ids (ints or numpy integers) to tokens."""
        return [self.inv_vocab[int(index)] for index in ids]

    @property
    def vocab_size(self) -> int:
        """Number of entries in the vocabulary."""
        return len(self.vocab)

    @property
    def pad_id(self) -> int:
        """Id of [PAD]."""
        return self.vocab["[PAD]"]

    @property
    def unk_id(self) -> int:
        """Id of [UNK]."""
        return self.vocab["[UNK]"]

    @property
    def cls_id(self) -> int:
        """Id of [CLS]."""
        return self.vocab["[CLS]"]

    @property
    def sep_id(self) -> int:
        """Id of [SEP]."""
        return self.vocab["[SEP]"]

    @property
    def mask_id(self) -> int:
        """Id of [MASK]."""
        return self.vocab["[MASK]"]
