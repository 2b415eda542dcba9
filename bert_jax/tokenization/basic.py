"""BasicTokenizer: google-research/bert's text cleaning and word splitting.

The rules (G-BERT `tokenization.BasicTokenizer`), applied in this order:
  1. drop NUL, U+FFFD and control characters (Unicode category C*, which also
     covers format, surrogate, private-use and unassigned code points), except
     \\t \\n \\r, which are whitespace;
  2. put spaces around CJK ideographs;
  3. split on whitespace (Python's `str.split()`);
  4. if lower-casing: `str.lower()` per word, then NFD and drop category Mn;
  5. split off every punctuation character (non-alphanumeric ASCII and Unicode
     category P*) as its own word.
Every predicate reads Python's `unicodedata`, as G-BERT does, so the output is
G-BERT's on the running Python (3.11: Unicode 14).

Why not HF tokenizers' BertNormalizer + BertPreTokenizer: run on every code
point (tokenizers 0.23.3) and compared with these rules, they differ on
  - 829,834 unassigned code points (category Cn), which G-BERT drops as
    "control" and HF keeps: its Unicode tables are older;
  - 384 newer Mn marks it does not strip, 13 newer Cf it does not drop, 104
    newer P* characters it does not split off; U+166D (P* once, So now) it
    does split off, and 2 marks that are Mc now it strips;
  - final sigma: it lower-cases char by char, so word-final 'Σ' becomes 'σ'
    where Python's `str.lower()` gives 'ς';
  - its CJK Extension E range starts at U+2B920 instead of U+2B820, so 256
    ideographs are not isolated.
So the whole of this step is done here, with `str.translate` tables and a
regex for ASCII text, which keeps it at C speed.
"""

import re
import unicodedata

# Inclusive code point ranges of G-BERT's `_is_chinese_char`: the CJK Unified
# Ideographs block, its Extensions A-E and the Compatibility Ideographs. Hangul
# and kana are not in it: they are split on whitespace like Latin.
_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)

# G-BERT counts every non-alphanumeric printable ASCII char as punctuation,
# including symbols such as $ + < = > ^ ` | ~ that Unicode files under S*.
_ASCII_PUNCT = "".join(
    chr(cp) for cp in (*range(33, 48), *range(58, 65), *range(91, 97), *range(123, 127))
)
_ASCII_PUNCT_CLASS = re.escape(_ASCII_PUNCT)
# ASCII control characters other than \t \n \r (these three are whitespace).
_ASCII_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# A word is one punctuation char or a run of chars that are neither whitespace
# nor punctuation: steps 3 and 5 in one pass for ASCII text.
_ASCII_WORDS = re.compile(rf"[{_ASCII_PUNCT_CLASS}]|[^\s{_ASCII_PUNCT_CLASS}]+")


def _is_control(char: str) -> bool:
    return char not in "\t\n\r" and unicodedata.category(char).startswith("C")


def _is_punctuation(char: str) -> bool:
    return char in _ASCII_PUNCT or unicodedata.category(char).startswith("P")


def _is_cjk(char: str) -> bool:
    cp = ord(char)
    return any(first <= cp <= last for first, last in _CJK_RANGES)


def _clean(char: str) -> str | None:
    """Steps 1-2 for one char: None drops it, CJK gets spaces around it."""
    if char in "\x00\ufffd" or _is_control(char):
        return None
    if _is_cjk(char):
        return f" {char} "
    return char


def _clean_and_split_punctuation(char: str) -> str | None:
    """Steps 1, 2 and 5 for one char (the cased path does no step 4)."""
    cleaned = _clean(char)
    if cleaned == char and _is_punctuation(char):
        return f" {char} "
    return cleaned


def _strip_accent_and_split_punctuation(char: str) -> str | None:
    """The tail of step 4 (drop Mn) and step 5 for one char of NFD text."""
    if unicodedata.category(char) == "Mn":
        return None
    if _is_punctuation(char):
        return f" {char} "
    return char


class _CharTable(dict):
    """A `str.translate` table that classifies each code point once, when first seen.

    Precomputing all 1.1M code points would cost seconds at import and ~100 MB
    a table; real text uses a few thousand distinct characters.
    """

    def __init__(self, classify):
        super().__init__()
        self._classify = classify

    def __missing__(self, cp: int) -> str | None:
        value = self[cp] = self._classify(chr(cp))
        return value


_CLEAN = _CharTable(_clean)
_CLEAN_AND_SPLIT_PUNCTUATION = _CharTable(_clean_and_split_punctuation)
_STRIP_ACCENT_AND_SPLIT_PUNCTUATION = _CharTable(_strip_accent_and_split_punctuation)


def to_str(text: str | bytes) -> str:
    """G-BERT's `convert_to_unicode`: bytes are UTF-8, invalid bytes dropped."""
    if isinstance(text, str):
        return text
    if isinstance(text, bytes):
        return text.decode("utf-8", "ignore")
    raise TypeError(f"expected str or bytes, got {type(text).__name__}")


class BasicTokenizer:
    """Cleans text and splits it into words and punctuation, as G-BERT's BasicTokenizer."""

    def __init__(self, do_lower_case: bool = True):
        self.do_lower_case = do_lower_case

    def tokenize(self, text: str | bytes) -> list[str]:
        """Returns the words of `text`, lower-cased and accent-stripped if do_lower_case."""
        text = to_str(text)
        if text.isascii():
            # For ASCII the rules reduce to: drop C0 controls and DEL, lower,
            # split on whitespace and ASCII punctuation.
            if _ASCII_CONTROL.search(text):
                text = _ASCII_CONTROL.sub("", text)
            if self.do_lower_case:
                text = text.lower()
            return _ASCII_WORDS.findall(text)
        if not self.do_lower_case:
            return text.translate(_CLEAN_AND_SPLIT_PUNCTUATION).split()
        # Lower-casing the space-joined words equals lower-casing each word:
        # the only context `str.lower` reads is final sigma's, which stops at
        # a space (neither cased nor case-ignorable). NFD and dropping Mn are
        # per char, so they can run on the whole text too.
        text = " ".join(text.translate(_CLEAN).split()).lower()
        return (
            unicodedata.normalize("NFD", text)
            .translate(_STRIP_ACCENT_AND_SPLIT_PUNCTUATION)
            .split()
        )
