"""sentence_split: the documented rules, one case each."""
import pytest

from bert_jax.pretraining.sentence_split import split_sentences


@pytest.mark.parametrize("text, expected", [
    ("It rained. We stayed in! Did you? Yes.", ["It rained.", "We stayed in!", "Did you?", "Yes."]),
    ("First line without a stop\nSecond line.", ["First line without a stop", "Second line."]),
    ("One.\n\n\nTwo.", ["One.", "Two."]),
    ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
    ("It ended (finally.) Then 1990 came.", ["It ended (finally.)", "Then 1990 came."]),
    ("Wait... What?! Fine.", ["Wait...", "What?!", "Fine."]),
    ("lower case after a stop. does not split.", ["lower case after a stop. does not split."]),
])
def test_splits_at_terminators_before_a_capital_or_digit(text, expected):
    assert split_sentences(text) == expected


@pytest.mark.parametrize("text", [
    "Mr. Smith met Dr. Jones.",
    "See e.g. The Book for details.",
    "J. R. R. Tolkien wrote it.",
    "The U.S. Army grew.",
    "See No. 5 and pp. 10 to 12.",
    "Pi is 3.14 or so.",
])
def test_abbreviations_initials_acronyms_and_numbers_do_not_split(text):
    assert split_sentences(text) == [text]


def test_a_numbered_abbreviation_before_a_capital_word_splits():
    assert split_sentences("They said no. Then they left.") == ["They said no.", "Then they left."]


def test_whitespace_only_gives_nothing():
    assert split_sentences(" \n \t\n") == []
