"""A small rule-based sentence splitter for running text (no dependencies).

create_pretraining_data wants one sentence per line. Text that arrives as
whole documents (TFDS datasets, docstrings) is split with these rules:

1. A line break ends a sentence: text corpora such as TFDS's wikipedia and
   c4 hold one paragraph or heading per line.
2. Within a line, a sentence ends after a run of `.`, `!`, `?` or `…`, plus
   any closing quotes or brackets, when whitespace follows and the next word
   (after any opening quotes or brackets) starts with an uppercase letter or
   a digit.
3. Except after a single `.` that ends
   - a known abbreviation that is rarely sentence-final (titles such as
     "Mr.", "Dr.", "Gen.", Latin "e.g.", "i.e.", "cf.", "vs.", "et al."),
   - a single letter, as initials ("J. R. R. Tolkien"),
   - a dotted acronym ("U.S.", "U.K."),
   - or "No.", "Vol.", "pp.", "Fig." and the like when a number follows.

Like any rule set it errs on rare cases (an acronym that does end a
sentence stays glued to the next one); for pretraining data an occasional
long or short sentence is harmless.
"""
from __future__ import annotations

import re

# Rarely sentence-final, so a following capital does not start a sentence.
_ABBREVIATIONS = frozenset(
    """
    mr mrs ms messrs mme mlle dr prof rev hon st mt ft sr jr gen col maj capt lt sgt
    cmdr adm gov sen rep pres supt insp e.g i.e cf vs viz al approx ca est dept univ assn
    """.split()
)
# Abbreviations that precede a number ("No. 5", "pp. 10-12").
_BEFORE_NUMBERS = frozenset("no nos vol vols p pp fig figs art sec ch eq ex op".split())

# The end of a candidate sentence: terminators, closing quotes/brackets, then
# (looking ahead) whitespace, opening quotes/brackets and the next word's first
# character.
_BOUNDARY = re.compile(r"""[.!?\u2026]+["'\u201d\u2019)\]]*(?=\s+["'\u201c\u2018(\[]*(\w))""")
_ACRONYM = re.compile(r"(?:[^\W\d_]\.)+[^\W\d_]")
_LAST_WORD = re.compile(r"(\S+)$")


def _is_boundary(text: str, match: re.Match) -> bool:
    following = match.group(1)
    if not (following.isupper() or following.isdigit()):
        return False
    if match.group(0) != ".":
        return True
    word = _LAST_WORD.search(text, 0, match.start())
    if word is None:
        return True
    word = word.group(1).lstrip("\"'(\u201c\u2018[")
    lower = word.lower()
    if lower in _ABBREVIATIONS or (lower in _BEFORE_NUMBERS and following.isdigit()):
        return False
    if len(word) == 1 and word.isalpha():  # an initial
        return False
    return _ACRONYM.fullmatch(word) is None


def split_sentences(text: str) -> list[str]:
    """Splits `text` into sentences (stripped, non-empty), by the rules above."""
    sentences = []
    for line in text.splitlines():
        start = 0
        for match in _BOUNDARY.finditer(line):
            if _is_boundary(line, match):
                sentences.append(line[start : match.end()].strip())
                start = match.end()
        sentences.append(line[start:].strip())
    return [s for s in sentences if s]
