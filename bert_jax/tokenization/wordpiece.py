"""FullTokenizer: google-research/bert's WordPiece tokenizer, output for output.

BasicTokenizer (basic.py) splits text into words; each word is then split
greedily, longest match first, into vocabulary pieces, continuation pieces
prefixed with "##". A word longer than 200 chars, or one with a part no piece
matches, becomes a single [UNK].

That second step is HF tokenizers' WordPiece model (Rust), which follows the
same algorithm: it is identical to G-BERT on every word the tests throw at it.
Natural text repeats its words, so an LRU cache of word -> pieces sits in
front: a hit costs one C-level call, where a trip into Rust costs a few
microseconds. On the 2.9 MB speeches corpus, on one core, `encode_batch`
takes ~0.35 s of CPU; HF's whole Bert pipeline (which is not G-BERT's, see
basic.py) takes ~1.3 s.
"""
import functools
import itertools
import os

from tokenizers import models

from bert_jax.tokenization.basic import BasicTokenizer
from bert_jax.tokenization.vocab import Vocabulary, load_vocab

MAX_INPUT_CHARS_PER_WORD = 200  # G-BERT's WordpieceTokenizer default
# Distinct words kept by each of the two caches (pieces, ids): the 65k most
# recent words cover nearly every word of natural text; both full take ~50 MB.
_WORD_CACHE_SIZE = 1 << 16


class FullTokenizer(Vocabulary):
    """BasicTokenizer + WordPiece over a BERT vocab.txt, with G-BERT's API.

    Attributes: vocab (token -> id, in file order), inv_vocab (id -> token),
    basic_tokenizer, do_lower_case, continuation_mask ([vocab_size] bool).
    """

    def __init__(self, vocab_file: str | os.PathLike, do_lower_case: bool = True):
        self.vocab_file = str(vocab_file)
        self.do_lower_case = do_lower_case
        super().__init__(load_vocab(vocab_file), vocab_file)
        self.basic_tokenizer = BasicTokenizer(do_lower_case)
        model = models.WordPiece(
            vocab=self.vocab, unk_token="[UNK]", max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD)

        @functools.lru_cache(maxsize=_WORD_CACHE_SIZE)
        def word_pieces(word: str) -> tuple[str, ...]:
            return tuple(piece.value for piece in model.tokenize(word))

        @functools.lru_cache(maxsize=_WORD_CACHE_SIZE)
        def word_ids(word: str) -> tuple[int, ...]:
            return tuple(piece.id for piece in model.tokenize(word))

        self._word_pieces, self._word_ids = word_pieces, word_ids

    def __reduce__(self):
        # Pickle as "load this vocab again": the HF model and caches are rebuilt.
        return type(self), (self.vocab_file, self.do_lower_case)

    def is_continuation(self, token: str) -> bool:
        """True for a piece that continues a word ("##" prefix)."""
        return token.startswith("##")

    def tokenize(self, text: str | bytes) -> list[str]:
        """Returns the WordPiece tokens of `text` (no special tokens added)."""
        words = self.basic_tokenizer.tokenize(text)
        return list(itertools.chain.from_iterable(map(self._word_pieces, words)))

    def encode(self, text: str | bytes) -> list[int]:
        """Returns the ids of `tokenize(text)`."""
        words = self.basic_tokenizer.tokenize(text)
        return list(itertools.chain.from_iterable(map(self._word_ids, words)))

    def tokenize_batch(self, texts: list[str]) -> list[list[str]]:
        """`tokenize` over a list of texts."""
        return [self.tokenize(text) for text in texts]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """`encode` over a list of texts: ids, no special tokens added."""
        return [self.encode(text) for text in texts]
