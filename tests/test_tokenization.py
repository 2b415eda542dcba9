"""FullTokenizer must equal google-research/bert's tokenizer on any text.

The reference is an oracle written here from G-BERT's rules (DESIGN.md),
literally and slowly, one character at a time: clean, space around CJK, split
on whitespace, lower + NFD + drop Mn per word, split off punctuation, greedy
longest-match WordPiece. bert_jax gets there by other roads (translate tables,
regexes, HF's WordPiece, caches); every test below compares the two.
"""

import functools
import json
import pickle
import random
import unicodedata

import numpy as np
import pytest
import sentencepiece as spm

from bert_jax.tokenization import (
    BasicTokenizer,
    FullTokenizer,
    SentencePieceTokenizer,
    load_tokenizer,
    load_vocab,
    vocab_training,
)

# ----------------------------------------------------------------------------
# The oracle.

# The per-char predicates are memoized, for speed only.
_memo = functools.lru_cache(maxsize=1 << 16)

ORACLE_CJK_RANGES = [
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
]


@_memo
def oracle_is_whitespace(ch):
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


@_memo
def oracle_is_control(ch):
    if ch in "\t\n\r":
        return False
    return unicodedata.category(ch).startswith("C")


@_memo
def oracle_is_punctuation(ch):
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


@_memo
def oracle_is_cjk(ch):
    return any(lo <= ord(ch) <= hi for lo, hi in ORACLE_CJK_RANGES)


def oracle_basic(text, do_lower_case):
    """G-BERT's BasicTokenizer, step by step."""
    cleaned = []
    for ch in text:
        if ord(ch) == 0 or ord(ch) == 0xFFFD or oracle_is_control(ch):
            continue
        cleaned.append(" " if oracle_is_whitespace(ch) else ch)
    spaced = []
    for ch in cleaned:
        spaced.append(f" {ch} " if oracle_is_cjk(ch) else ch)
    words = []
    for token in "".join(spaced).strip().split():
        if do_lower_case:
            token = token.lower()
            token = unicodedata.normalize("NFD", token)
            token = "".join(ch for ch in token if unicodedata.category(ch) != "Mn")
        current = ""
        for ch in token:
            if oracle_is_punctuation(ch):
                if current:
                    words.append(current)
                words.append(ch)
                current = ""
            else:
                current += ch
        if current:
            words.append(current)
    return " ".join(words).strip().split()


def oracle_wordpiece(word, vocab):
    """G-BERT's WordpieceTokenizer on one word."""
    if len(word) > 200:
        return ["[UNK]"]
    pieces = []
    start = 0
    while start < len(word):
        end = len(word)
        found = None
        while start < end:
            candidate = word[start:end] if start == 0 else "##" + word[start:end]
            if candidate in vocab:
                found = candidate
                break
            end -= 1
        if found is None:
            return ["[UNK]"]
        pieces.append(found)
        start = end
    return pieces


def oracle_tokenize(text, vocab, do_lower_case):
    return [
        piece
        for word in oracle_basic(text, do_lower_case)
        for piece in oracle_wordpiece(word, vocab)
    ]


class ChunkedOracle:
    """The oracle, fast enough for megabytes of natural text.

    U+0020 is a word boundary under every rule (never dropped, never part of
    a word, and it stops final sigma's look-around), so a text's tokens are
    its space-separated chunks' tokens concatenated; chunks repeat, so they
    are memoized.
    """

    def __init__(self, vocab, do_lower_case):
        self.vocab, self.do_lower_case, self.memo = vocab, do_lower_case, {}

    def __call__(self, text):
        out = []
        for chunk in text.split(" "):
            if chunk not in self.memo:
                self.memo[chunk] = oracle_tokenize(chunk, self.vocab, self.do_lower_case)
            out.extend(self.memo[chunk])
        return out


# ----------------------------------------------------------------------------
# Inputs.

TRICKY = [
    "",
    "   \t\n\r  ",
    "Hello, World! It's 3.14 -- isn't it?",
    "unaffable UNAFFABLE Unaffable",
    "a\x00b a\x01b a\x7fb a\x1fb a\x0bb a\x0cb a\x1cb\tc\rd\ne",  # ASCII: dropped, the neighbours join  # noqa: E501
    "a\x00b a\ufffdb a\x7fb a\x1fb a\x0bb a\x0cb a\x85b",  # the same, on the non-ASCII path
    "soft\u00adhyphen zero\u200bwidth bom\ufeffhere rtl\u200fmark tag\U000e0041s",  # Cf
    "line\u2028sep para\u2029sep nbsp\xa0here ideo\u3000space en\u2002space ogham\u1680",
    "\ud800lone surrogate\udfff",
    "unassigned\u0378here \U0010ffff private\ue000use",
    "\u4e2d\u6587abc\u65e5\u672c\u8a9e \uf900\ufa0e compat \U00020000 \U0002a6df",
    "ext-e boundary \U0002b81f\U0002b820\U0002b91f\U0002b920 ext-g \U00030000",
    "\u3042\u3044 \u30ab\u30bf\u30ab\u30ca \ud55c\uad6d\uc5b4",  # kana, hangul: not CJK
    "\u3001\u3002\u300c\u300d\uff01\uff1f",  # CJK punctuation, fullwidth
    "\u039f\u0394\u039f\u03a3 \u039f\u0394\u039f\u03a3.\u0391 \u03a3 \u0391\u03a3\u0301 \u0391\u03a3\u00ad\u0392",  # sigma  # noqa: E501
    "\u0130stanbul \u0131i I\u0307 \u1e9e STRASSE stra\xdfe",  # İ, dotless i, capital sharp s
    "\ufb01ne \ufb03 \u212a\u2126\u212b \u01c5 \u1f88",  # ligatures, Kelvin/Ohm/Angstrom, titlecase
    "e\u0301 \xe9 Ame\u0301lie Am\xe9lie na\xefve NA\xcfVE cr\xe8me br\xfbl\xe9e",  # NFD vs NFC
    "\u0915\u094d\u0937 \u0e01\u0e34\u0e19 \u05e9\u05b8\u05c1\u05dc\u05d5\u05b9\u05dd",  # marks
    "$5+3=8 <tag> a^b `x` {y} |z| ~w~ @home #1 100% &amp; a_b",  # ASCII symbols count as punct
    "\u00a1Hola! \u00bfQu\xe9? \u2014dash\u2013 \u201cquotes\u201d \u2026 \u00a7 \u00b6 \u00b7",
    "\u166d \u2e43 \u2e5d \u0609 \u10ead",  # newer punctuation and U+166D (So now)
    "emoji \U0001f600\U0001f44d\U0001f3fd \U0001f469\u200d\U0001f4bb \u2764\ufe0f flags \U0001f1fa\U0001f1f8",  # noqa: E501
    "\u0300\u0301leading marks",
    "x" * 200 + " " + "x" * 201,
    "\xe9" * 150
    + " "
    + "e\u0301" * 100
    + " "
    + "\u0130" * 150,  # lengths change under normalization
    "[CLS] [SEP] [MASK] [UNK] [PAD]",
]

# Pools the random strings draw from.
_POOLS = [
    "abcdefghijklmnopqrstuvwxyz" * 3 + "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
    " " * 8
    + "\t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u2007\u200a\u2028\u2029\u202f\u205f\u3000",  # noqa: E501
    "".join(map(chr, range(0x20, 0x7F))),
    "".join(map(chr, range(0x80, 0x100))),
    "".join(map(chr, range(0x300, 0x370))) + "\u1ab0\u1ac0\u1dc0\u20d0\u20e3\ufe0f\ufe20",
    "".join(map(chr, range(0x370, 0x500))) + "\u03a3" * 20,
    "\u4e00\u4e8c\u4e09\u4e2d\u6587\u5b57\u9fff\u3400\uf900\ufa6d\ufaff"
    "\U00020000\U0002a6df\U0002a700\U0002b81f\U0002b820\U0002b91f\U0002b920\U0002ceaf\U0002f800\U00030000",
    "".join(map(chr, range(0x2000, 0x2070))) + "".join(map(chr, range(0x2E00, 0x2E60))),
    "".join(map(chr, range(0x3000, 0x3040))) + "".join(map(chr, range(0xFF00, 0xFF66))),
    "\x00\x01\x07\x7f\ufffd\ufeff\u00ad\u200b\u200c\u200d\u200e\u2060\ud800\udfff\ue000"
    "\U000e0001\U000e0041\U0010ffff\u0378\u0890\u08e2\u0600\U000f0000",
    "\U0001f600\U0001f44d\U0001f3fd\U0001f469\U0001f4bb\u2764\U0001f1fa\U0001f1f8\U0001faf6",
    "\u0130\u0131\u1e9e\xdf\ufb01\ufb03\u212a\u2126\u212b\u01c5\u1f88\u0149\u1e96\u0587\u1f80",
    "".join(map(chr, range(0x900, 0x980)))
    + "".join(map(chr, range(0xE00, 0xE60)))
    + "\uac00\ud55c",
]
_POOL_WEIGHTS = [8, 4, 4, 2, 2, 3, 2, 2, 1, 2, 1, 2, 1]
_ASCII = "".join(map(chr, range(0x80)))


def random_strings(n, seed):
    """Seeded random strings mixing every kind of character the rules treat specially."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        if rng.random() < 0.25:  # all-ASCII text takes a path of its own
            pools = [_POOLS[0], _POOLS[1][:12], _ASCII]
        else:
            pools = rng.choices(_POOLS, _POOL_WEIGHTS, k=rng.randint(1, 3))
        out.append("".join(rng.choice(rng.choice(pools)) for _ in range(rng.randint(0, 40))))
    return out


def _code_point_sweep():
    """Every code point below U+32000 and in the tag/variation-selector block,
    every 97th above (mostly unassigned), and the last one."""
    dense = [*range(0x32000), *range(0xE0000, 0xE0200)]
    sparse = range(0x32000, 0x110000, 97)
    return sorted({*dense, *sparse, 0x10FFFF})


@pytest.fixture(scope="module")
def small_vocab_file(tmp_path_factory):
    """A vocab.txt in tmp_path: specials, every char of the random pools (as a
    word start and as "##"), and some longer pieces, so WordPiece has choices."""
    chars = sorted(
        {ch for pool in _POOLS for ch in pool if not ch.isspace()}
        | set("abcdefghijklmnopqrstuvwxyz\u03c2\u03c3\u0131")
    )
    pieces = [
        "un",
        "##aff",
        "##able",
        "aff",
        "the",
        "##the",
        "th",
        "##s",
        "##ing",
        "hello",
        "##ll",
        "##o",
        "\u03bf\u03b4\u03bf\u03c2",
        "\u4e2d",
        "##\u00e9",
        "ame",
        "##lie",
        "xx",
        "##xx",
        "##xxx",
    ]
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + pieces
    tokens += [ch for ch in chars if ch not in tokens]
    tokens += ["##" + ch for ch in chars if "##" + ch not in tokens]
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    # Lone surrogates cannot be written as UTF-8; they are dropped as control
    # chars anyway.
    path.write_text(
        "\n".join(t for t in tokens if not 0xD800 <= ord(t[-1]) <= 0xDFFF) + "\n", encoding="utf-8"
    )
    return path


# ----------------------------------------------------------------------------
# Identity with the oracle.


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_tricky_strings_match_oracle(small_vocab_file, do_lower_case):
    tokenizer = FullTokenizer(small_vocab_file, do_lower_case=do_lower_case)
    for text in TRICKY:
        assert tokenizer.basic_tokenizer.tokenize(text) == oracle_basic(text, do_lower_case), repr(
            text
        )
        assert tokenizer.tokenize(text) == oracle_tokenize(text, tokenizer.vocab, do_lower_case), (
            repr(text)
        )


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_random_strings_match_oracle(small_vocab_file, do_lower_case):
    tokenizer = FullTokenizer(small_vocab_file, do_lower_case=do_lower_case)
    texts = random_strings(3000, seed=int(do_lower_case))
    got = tokenizer.tokenize_batch(texts)
    for text, tokens in zip(texts, got):
        assert tokens == oracle_tokenize(text, tokenizer.vocab, do_lower_case), repr(text)
    assert tokenizer.encode_batch(texts) == [tokenizer.convert_tokens_to_ids(t) for t in got]


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_every_code_point_is_treated_as_gbert_does(do_lower_case):
    # Each code point between a cased letter pair: dropping, isolating,
    # stripping or lower-casing it differently shows in the words.
    text = "".join(f"x\u0391{chr(cp)}Bx " for cp in _code_point_sweep())
    assert BasicTokenizer(do_lower_case).tokenize(text) == oracle_basic(text, do_lower_case)
    ascii_text = "".join(f"xA{chr(cp)}Bx " for cp in range(0x80))
    assert BasicTokenizer(do_lower_case).tokenize(ascii_text) == oracle_basic(
        ascii_text, do_lower_case
    )


def test_long_words_become_unk(small_vocab_file):
    tokenizer = FullTokenizer(small_vocab_file)
    assert tokenizer.tokenize("x" * 200) == ["xx"] + ["##xxx"] * 66
    assert tokenizer.tokenize("x" * 201) == ["[UNK]"]
    # The limit counts chars after normalization: 201 precomposed é stay 201
    # chars under NFD + strip; 101 decomposed ones are 202 chars cased, 101
    # uncased.
    assert tokenizer.tokenize("\xe9" * 201) == ["[UNK]"]
    assert FullTokenizer(small_vocab_file, do_lower_case=False).tokenize("e\u0301" * 101) == [
        "[UNK]"
    ]
    assert tokenizer.tokenize("e\u0301" * 101) == ["e"] + ["##e"] * 100


def test_unmatchable_word_is_one_unk(small_vocab_file):
    tokenizer = FullTokenizer(small_vocab_file)
    assert tokenizer.tokenize("hello\u263a hello") == ["[UNK]", "hello"]
    assert tokenizer.tokenize("unaffable") == ["un", "##aff", "##able"]


# ----------------------------------------------------------------------------
# The API.


def test_vocab_maps_follow_the_file(small_vocab_file):
    tokenizer = FullTokenizer(small_vocab_file)
    lines = small_vocab_file.read_text(encoding="utf-8").split("\n")[:-1]
    assert list(tokenizer.vocab) == lines
    assert list(tokenizer.vocab.values()) == list(range(len(lines)))
    assert tokenizer.inv_vocab == {i: t for i, t in enumerate(lines)}
    assert load_vocab(small_vocab_file) == tokenizer.vocab
    tokens = tokenizer.tokenize("Hello, unaffable world")
    ids = tokenizer.convert_tokens_to_ids(tokens)
    assert tokenizer.convert_ids_to_tokens(np.array(ids)) == tokens
    assert tokenizer.encode("Hello, unaffable world") == ids
    with pytest.raises(KeyError):
        tokenizer.convert_tokens_to_ids(["not-in-vocab"])


def test_special_ids_and_continuation_mask(small_vocab_file):
    tokenizer = FullTokenizer(small_vocab_file)
    assert (
        tokenizer.pad_id,
        tokenizer.unk_id,
        tokenizer.cls_id,
        tokenizer.sep_id,
        tokenizer.mask_id,
    ) == (0, 1, 2, 3, 4)
    assert tokenizer.is_continuation("##able") and not tokenizer.is_continuation("un")
    assert tokenizer.continuation_mask.dtype == bool
    assert tokenizer.continuation_mask.shape == (len(tokenizer.vocab),)
    expected = [token.startswith("##") for token in tokenizer.vocab]
    assert tokenizer.continuation_mask.tolist() == expected


def test_batches_equal_single_calls(small_vocab_file):
    tokenizer = FullTokenizer(small_vocab_file)
    texts = TRICKY + random_strings(50, seed=7)
    assert tokenizer.tokenize_batch(texts) == [tokenizer.tokenize(t) for t in texts]
    assert tokenizer.encode_batch(texts) == [tokenizer.encode(t) for t in texts]


def test_bytes_are_utf8(small_vocab_file):
    tokenizer = FullTokenizer(small_vocab_file)
    assert tokenizer.tokenize("Am\xe9lie".encode()) == tokenizer.tokenize("Am\xe9lie")
    assert tokenizer.tokenize(b"ab\xffcd") == tokenizer.tokenize("abcd")  # invalid bytes dropped
    with pytest.raises(TypeError):
        tokenizer.tokenize(3)


def test_pickles(small_vocab_file):
    tokenizer = FullTokenizer(small_vocab_file, do_lower_case=False)
    clone = pickle.loads(pickle.dumps(tokenizer))
    assert clone.do_lower_case is False
    assert clone.tokenize("Hello \u039f\u0394\u039f\u03a3") == tokenizer.tokenize(
        "Hello \u039f\u0394\u039f\u03a3"
    )


def test_missing_vocab_file_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        FullTokenizer(tmp_path / "nope.txt")


def test_vocab_without_specials_names_file_and_tokens(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\n[UNK]\n[CLS]\nhello\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"vocab\.txt.*\[SEP\] \[MASK\]"):
        FullTokenizer(path)


def test_duplicate_vocab_token_names_the_line(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\nhello\n", encoding="utf-8")
    with pytest.raises(
        ValueError, match=r"vocab\.txt:8: duplicate token 'hello' \(already on line 6\)"
    ):
        FullTokenizer(path)


def test_load_tokenizer_picks_the_kind(small_vocab_file, spm_model_file):
    assert isinstance(load_tokenizer(vocab_file=small_vocab_file), FullTokenizer)
    assert load_tokenizer(vocab_file=small_vocab_file, do_lower_case=False).do_lower_case is False
    assert isinstance(load_tokenizer(spm_model=spm_model_file), SentencePieceTokenizer)
    with pytest.raises(ValueError, match="exactly one"):
        load_tokenizer()
    with pytest.raises(ValueError, match="exactly one"):
        load_tokenizer(vocab_file=small_vocab_file, spm_model=spm_model_file)


# ----------------------------------------------------------------------------
# SentencePiece.

SPM_TEXT = [
    "The quick brown fox jumps over the lazy dog.",
    "Pack my box with five dozen liquor jugs!",
    "How vexingly quick daft zebras jump.",
    "Sphinx of black quartz, judge my vow.",
    "The five boxing wizards jump quickly; the dog sleeps.",
] * 40


@pytest.fixture(scope="module")
def spm_model_file(tmp_path_factory):
    """A tiny unigram model trained on pangrams."""
    corpus = tmp_path_factory.mktemp("spm") / "corpus.txt"
    corpus.write_text("\n".join(SPM_TEXT) + "\n", encoding="utf-8")
    return vocab_training.train_sentencepiece(
        [str(corpus)], vocab_size=50, do_lower_case=True, output=corpus.parent / "spm"
    )


def test_sentencepiece_interface(spm_model_file):
    tokenizer = SentencePieceTokenizer(spm_model_file, do_lower_case=True)
    assert (
        tokenizer.pad_id,
        tokenizer.unk_id,
        tokenizer.cls_id,
        tokenizer.sep_id,
        tokenizer.mask_id,
    ) == (0, 1, 2, 3, 4)
    assert list(tokenizer.vocab)[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert tokenizer.inv_vocab == {i: t for t, i in tokenizer.vocab.items()}
    pieces = tokenizer.tokenize("The QUICK dog")
    assert "".join(pieces).replace("\u2581", " ").strip() == "the quick dog"
    assert tokenizer.encode("The QUICK dog") == tokenizer.convert_tokens_to_ids(pieces)
    assert tokenizer.convert_ids_to_tokens(tokenizer.encode("The QUICK dog")) == pieces
    texts = ["the dog", "Sphinx of black quartz", ""]
    assert tokenizer.tokenize_batch(texts) == [tokenizer.tokenize(t) for t in texts]
    assert tokenizer.encode_batch(texts) == [tokenizer.encode(t) for t in texts]
    # Special tokens typed in text are text, never the control ids.
    assert not {2, 3, 4} & set(tokenizer.encode("[CLS] [SEP] [MASK]"))


def test_sentencepiece_continuations(spm_model_file):
    tokenizer = SentencePieceTokenizer(spm_model_file)
    assert tokenizer.is_continuation("ick") and not tokenizer.is_continuation("\u2581qu")
    assert not any(
        tokenizer.is_continuation(t) for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    )
    expected = [tokenizer.is_continuation(t) for t in tokenizer.vocab]
    assert tokenizer.continuation_mask.tolist() == expected
    assert tokenizer.continuation_mask.any() and not tokenizer.continuation_mask.all()
    # Within a word, every piece after the first is a continuation.
    ids = tokenizer.encode("jumps")
    assert tokenizer.continuation_mask[ids].tolist() == [False] + [True] * (len(ids) - 1)


def test_sentencepiece_case_and_pickle(spm_model_file):
    lower = SentencePieceTokenizer(spm_model_file, do_lower_case=True)
    cased = SentencePieceTokenizer(spm_model_file, do_lower_case=False)
    assert lower.tokenize("QUICK") == lower.tokenize("quick") != cased.tokenize("QUICK")
    assert pickle.loads(pickle.dumps(cased)).tokenize("QUICK") == cased.tokenize("QUICK")


def test_sentencepiece_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.model"):
        SentencePieceTokenizer(tmp_path / "missing.model")
    # A model trained with SentencePiece's defaults (<unk> <s> </s>) is no BERT vocabulary.
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(SPM_TEXT),
        model_prefix=str(tmp_path / "plain"),
        vocab_size=40,
        minloglevel=2,
    )
    with pytest.raises(
        ValueError, match=r"plain\.model lacks the special tokens \[PAD\] \[UNK\] \[CLS\]"
    ):
        SentencePieceTokenizer(tmp_path / "plain.model")


# ----------------------------------------------------------------------------
# Real data (../shared), with G-BERT's uncased vocab.


def _shared_texts(data):
    """Every distinct line of the speeches corpus and text of the GLUE TSVs and SQuAD."""
    texts = (
        (data / "corpus" / "us_presidential_speeches.txt").read_text(encoding="utf-8").split("\n")
    )
    for path in sorted((data / "glue").glob("*/*.tsv")):
        for line in path.read_text(encoding="utf-8").split("\n"):
            texts.extend(line.split("\t"))
    for path in sorted((data / "squad").glob("*.json")):
        for article in json.loads(path.read_text(encoding="utf-8"))["data"]:
            texts.append(article["title"])
            for paragraph in article["paragraphs"]:
                texts.append(paragraph["context"])
                for qa in paragraph["qas"]:
                    texts.append(qa["question"])
                    texts.extend(answer["text"] for answer in qa["answers"])
    return list(dict.fromkeys(texts))


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_shared_data_matches_oracle(shared_data, do_lower_case):
    tokenizer = FullTokenizer(
        shared_data / "google_bert" / "vocab.txt", do_lower_case=do_lower_case
    )
    oracle = ChunkedOracle(tokenizer.vocab, do_lower_case)
    texts = _shared_texts(shared_data)
    assert len(texts) > 150_000
    for text, tokens in zip(texts, tokenizer.tokenize_batch(texts)):
        assert tokens == oracle(text), repr(text)


def test_real_vocab_on_random_strings(shared_data):
    tokenizer = FullTokenizer(shared_data / "google_bert" / "vocab.txt")
    assert len(tokenizer.vocab) == 30522
    assert (
        tokenizer.pad_id,
        tokenizer.unk_id,
        tokenizer.cls_id,
        tokenizer.sep_id,
        tokenizer.mask_id,
    ) == (0, 100, 101, 102, 103)
    for text in random_strings(1000, seed=3):
        assert tokenizer.tokenize(text) == oracle_tokenize(text, tokenizer.vocab, True), repr(text)


def test_matches_google_bert_pretraining_data(shared_data):
    # speeches_seq128.tfrecord is google-research/bert's own output on the
    # speeches corpus with this vocab: with the masked tokens put back, each
    # segment of each instance is a run of consecutive sentences of one
    # document (maybe cut at either end), so it must be a run of our ids.
    import tensorflow as tf  # only this test reads TFRecords

    tokenizer = FullTokenizer(shared_data / "google_bert" / "vocab.txt")
    text = (shared_data / "corpus" / "us_presidential_speeches.txt").read_text(encoding="utf-8")
    # Each document's ids as one string, one char per id (all ids < 0xD800),
    # documents joined by a char no id maps to: substring search finds runs.
    documents = "\uffff".join(
        "".join(chr(i) for ids in tokenizer.encode_batch(document.split("\n")) for i in ids)
        for document in text.split("\n\n")
    )
    n_segments = 0
    for record in tf.data.TFRecordDataset(
        str(shared_data / "google_bert" / "speeches_seq128.tfrecord")
    ).take(3000):
        feature = tf.train.Example.FromString(record.numpy()).features.feature
        ids = list(feature["input_ids"].int64_list.value)[
            : sum(feature["input_mask"].int64_list.value)
        ]
        for position, label, weight in zip(
            feature["masked_lm_positions"].int64_list.value,
            feature["masked_lm_ids"].int64_list.value,
            feature["masked_lm_weights"].float_list.value,
        ):
            if weight:
                ids[position] = label
        first_sep = ids.index(tokenizer.sep_id)
        for segment in (ids[1:first_sep], ids[first_sep + 1 : -1]):
            assert "".join(map(chr, segment)) in documents, tokenizer.convert_ids_to_tokens(segment)
            n_segments += 1
    assert n_segments == 6000
