"""build_vocab: WordPiece vocab.txt and SentencePiece models that our tokenizers load."""

import pathlib
import random
import subprocess
import sys

import pytest

from bert_jax.fileio.file_patterns import expand_file_patterns
from bert_jax.tokenization import FullTokenizer, SentencePieceTokenizer, load_vocab, vocab_training

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _made_up_corpus(path, n_lines=3000, seed=0):
    """Sentences of pseudo-words from a fixed syllable set, with accents, CJK
    and punctuation; blank lines between 'documents'."""
    rng = random.Random(seed)
    syllables = [
        "ka",
        "lo",
        "mi",
        "tur",
        "en",
        "sa",
        "vé",
        "dro",
        "qui",
        "na",
        "ber",
        "ty",
        "ñu",
        "Ös",
        "xe",
    ]
    words = ["".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(800)]
    lines = []
    for i in range(n_lines):
        sentence = " ".join(rng.choices(words, k=rng.randint(3, 15)))
        lines.append(sentence.capitalize() + rng.choice([".", "!", "?", ", 中文."]))
        if i % 50 == 49:
            lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return _made_up_corpus(tmp_path_factory.mktemp("corpus") / "corpus.txt")


def _detokenize(tokens):
    """Joins WordPiece tokens back into words."""
    words = []
    for token in tokens:
        if token.startswith("##"):
            words[-1] += token[2:]
        else:
            words.append(token)
    return words


def test_wordpiece_vocab_loads_and_round_trips(corpus, tmp_path):
    path = vocab_training.train_wordpiece_vocab([str(corpus)], 500, True, tmp_path / "vocab.txt")
    vocab = load_vocab(path)
    assert list(vocab)[:5] == SPECIALS
    assert len(vocab) == 500
    assert any(token.startswith("##") for token in vocab)
    tokenizer = FullTokenizer(path, do_lower_case=True)
    assert (
        tokenizer.pad_id,
        tokenizer.unk_id,
        tokenizer.cls_id,
        tokenizer.sep_id,
        tokenizer.mask_id,
    ) == (0, 1, 2, 3, 4)
    # Every training line splits into known pieces that join back into its words.
    for line in corpus.read_text(encoding="utf-8").split("\n")[:200]:
        tokens = tokenizer.tokenize(line)
        assert "[UNK]" not in tokens
        assert _detokenize(tokens) == tokenizer.basic_tokenizer.tokenize(line)
    # The vocab was trained on BasicTokenizer's words: lower-cased, accents off.
    learned = "".join(list(vocab)[5:])
    assert not any(ch in learned for ch in "\u00e9\u00f1\u00f6\u00d6")
    assert not any(ch.isupper() for ch in learned)


def test_cased_wordpiece_vocab_keeps_case_and_accents(corpus, tmp_path):
    path = vocab_training.train_wordpiece_vocab(str(corpus), 500, False, tmp_path / "cased.txt")
    tokens = "".join(load_vocab(path))
    assert "\u00d6" in tokens and "\u00e9" in tokens


def test_wordpiece_refuses_to_overwrite(corpus, tmp_path):
    output = tmp_path / "vocab.txt"
    output.write_text("keep me\n", encoding="utf-8")
    with pytest.raises(FileExistsError, match="overwrite"):
        vocab_training.train_wordpiece_vocab([str(corpus)], 300, True, output)
    assert output.read_text(encoding="utf-8") == "keep me\n"
    vocab_training.train_wordpiece_vocab([str(corpus)], 300, True, output, overwrite=True)
    assert list(load_vocab(output))[:5] == SPECIALS
    assert [p.name for p in tmp_path.iterdir()] == ["vocab.txt"]  # no temp file left behind


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_sentencepiece_model(corpus, tmp_path, model_type):
    path = vocab_training.train_sentencepiece(
        [str(corpus)], 300, True, tmp_path / "spm.model", model_type=model_type
    )
    assert path == tmp_path / "spm.model"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spm.model", "spm.vocab"]
    tokenizer = SentencePieceTokenizer(path, do_lower_case=True)
    assert list(tokenizer.vocab)[:5] == SPECIALS
    assert len(tokenizer.vocab) == 300
    line = corpus.read_text(encoding="utf-8").split("\n")[0]
    pieces = tokenizer.tokenize(line)
    assert "[UNK]" not in pieces
    assert "".join(pieces).replace("\u2581", " ").strip() == line.lower()
    with pytest.raises(FileExistsError):
        vocab_training.train_sentencepiece(
            [str(corpus)], 300, True, tmp_path / "spm", model_type=model_type
        )


def test_input_files_expand_globs_and_lists(corpus, tmp_path):
    other = tmp_path / "b.txt"
    other.write_text("x\n", encoding="utf-8")
    assert expand_file_patterns(f"{corpus},{tmp_path}/*.txt") == [str(corpus), str(other)]
    with pytest.raises(FileNotFoundError, match="nothing-here"):
        expand_file_patterns(f"{corpus},{tmp_path}/nothing-here*")


def test_command_line(corpus, tmp_path):
    output = tmp_path / "vocab.txt"
    command = [
        sys.executable,
        "-m",
        "bert_jax.build_vocab",
        f"--input_file={corpus}",
        "--vocab_size=300",
        "--type=wordpiece",
        f"--output={output}",
        "--nodo_lower_case",
    ]
    repo_root = pathlib.Path(__file__).resolve().parent.parent
    subprocess.run(command, check=True, capture_output=True, cwd=repo_root)
    assert list(load_vocab(output))[:5] == SPECIALS
    assert any(token[:1].isupper() for token in load_vocab(output))
    failed = subprocess.run(command, capture_output=True, text=True, cwd=repo_root)
    assert failed.returncode != 0 and "--overwrite" in failed.stderr


def test_speeches_vocab(shared_data, tmp_path):
    lines = (
        (shared_data / "corpus" / "us_presidential_speeches.txt")
        .read_text(encoding="utf-8")
        .split("\n")
    )
    corpus = tmp_path / "speeches.txt"
    corpus.write_text("\n".join(lines[:6000]) + "\n", encoding="utf-8")
    path = vocab_training.train_wordpiece_vocab([str(corpus)], 2000, True, tmp_path / "vocab.txt")
    tokenizer = FullTokenizer(path)
    assert len(tokenizer.vocab) == 2000
    assert {"the", "government", "congress"} <= set(tokenizer.vocab)
    text = "The Congress of the United States shall assemble."
    assert _detokenize(tokenizer.tokenize(text)) == tokenizer.basic_tokenizer.tokenize(text)
    # Frequent words stay whole: ~1.5 pieces per word at this size (characters: ~5).
    sample = lines[6000:6500]
    n_words = sum(len(tokenizer.basic_tokenizer.tokenize(line)) for line in sample)
    n_pieces = sum(len(tokens) for tokens in tokenizer.tokenize_batch(sample))
    assert n_pieces < 1.7 * n_words
