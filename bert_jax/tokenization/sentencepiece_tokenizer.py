"""SentencePieceTokenizer: a SentencePiece model behind FullTokenizer's interface.

Models from `python -m bert_jax.build_vocab --type sentencepiece` carry BERT's
special tokens at fixed ids ([PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4), the
last three as control symbols, so they are never produced from text: as with
WordPiece, "[CLS]" typed in a text is tokenized as ordinary characters.
"""
import os

import sentencepiece as spm

from bert_jax.tokenization.basic import to_str
from bert_jax.tokenization.vocab import Vocabulary, check_file

WORD_START = "\u2581"  # "▁": SentencePiece's mark for a piece that starts a word


class SentencePieceTokenizer(Vocabulary):
    """Tokenizes with a SentencePiece model; same methods as FullTokenizer.

    do_lower_case lower-cases text (`str.lower`) before encoding; use the
    setting the model was trained with (build_vocab lower-cases its training
    text under --do_lower_case).
    """

    def __init__(self, model_file: str | os.PathLike, do_lower_case: bool = True):
        self.model_file = str(check_file(model_file, "SentencePiece model"))
        self.do_lower_case = do_lower_case
        self._sp = spm.SentencePieceProcessor(model_file=self.model_file)
        pieces = [self._sp.id_to_piece(index) for index in range(self._sp.get_piece_size())]
        # Control and unknown pieces ([CLS], [UNK], ...) start no word, but
        # they continue none either.
        self._special_pieces = {
            piece for index, piece in enumerate(pieces)
            if self._sp.is_control(index) or self._sp.is_unknown(index)}
        super().__init__({piece: index for index, piece in enumerate(pieces)}, self.model_file)

    def __reduce__(self):
        # Pickle as "load this model again".
        return type(self), (self.model_file, self.do_lower_case)

    def is_continuation(self, token: str) -> bool:
        """True for a piece that continues a word: no leading "▁", not special."""
        return not token.startswith(WORD_START) and token not in self._special_pieces

    def _prepare(self, text: str | bytes) -> str:
        text = to_str(text)
        return text.lower() if self.do_lower_case else text

    def tokenize(self, text: str | bytes) -> list[str]:
        """Returns the pieces of `text` (no special tokens added)."""
        return self._sp.encode(self._prepare(text), out_type=str)

    def encode(self, text: str | bytes) -> list[int]:
        """Returns the ids of `tokenize(text)`."""
        return self._sp.encode(self._prepare(text), out_type=int)

    def tokenize_batch(self, texts: list[str]) -> list[list[str]]:
        """`tokenize` over a list of texts (SentencePiece encodes them in parallel)."""
        return self._sp.encode([self._prepare(text) for text in texts], out_type=str)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """`encode` over a list of texts: ids, no special tokens added."""
        return self._sp.encode([self._prepare(text) for text in texts], out_type=int)
