"""Tokenizers: WordPiece exactly as google-research/bert, and SentencePiece.

    from bert_jax.tokenization import load_tokenizer
    tokenizer = load_tokenizer(vocab_file="vocab.txt", do_lower_case=True)
    tokenizer.tokenize("Hello, world!")      # ['hello', ',', 'world', '!']
    tokenizer.encode_batch(["Hello", "Hi"])  # ids, no special tokens

Both tokenizers share one interface: tokenize / encode and their _batch
forms, convert_tokens_to_ids / convert_ids_to_tokens, vocab / inv_vocab,
is_continuation / continuation_mask, and pad_id unk_id cls_id sep_id mask_id.
Vocabularies are trained with `train_wordpiece_vocab` / `train_sentencepiece`
(`python -m bert_jax.build_vocab`).
"""
import os

from bert_jax.tokenization.basic import BasicTokenizer
from bert_jax.tokenization.sentencepiece_tokenizer import SentencePieceTokenizer
from bert_jax.tokenization.vocab import SPECIAL_TOKENS, load_vocab
from bert_jax.tokenization.vocab_training import train_sentencepiece, train_wordpiece_vocab
from bert_jax.tokenization.wordpiece import FullTokenizer

__all__ = [
    "SPECIAL_TOKENS", "BasicTokenizer", "FullTokenizer", "SentencePieceTokenizer",
    "load_tokenizer", "load_vocab", "train_sentencepiece", "train_wordpiece_vocab",
]


def load_tokenizer(
    vocab_file: str | os.PathLike | None = None,
    spm_model: str | os.PathLike | None = None,
    do_lower_case: bool = True,
) -> FullTokenizer | SentencePieceTokenizer:
    """Returns a FullTokenizer for `vocab_file` or a SentencePieceTokenizer for `spm_model`.

    Exactly one of the two must be given.
    """
    if (vocab_file is None) == (spm_model is None):
        raise ValueError(
            f"pass exactly one of vocab_file (WordPiece) or spm_model (SentencePiece); "
            f"got vocab_file={vocab_file!r}, spm_model={spm_model!r}")
    if vocab_file is not None:
        return FullTokenizer(vocab_file, do_lower_case=do_lower_case)
    return SentencePieceTokenizer(spm_model, do_lower_case=do_lower_case)
