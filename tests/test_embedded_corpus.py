"""embedded_corpus: prose extraction, the corpus file, and the one-call pretraining data."""
import os

from bert_jax.pretraining import embedded_corpus

DOCSTRING = '''Compute the thing along an axis.

    The result is the thing of every element, taken over the flattened array
    by default. This is a second sentence.

    Parameters
    ----------
    axis : int, optional
        Axis along which the thing is computed. The default is all axes.

    Examples
    --------
    >>> compute(np.ones(3))
    3.0

    Use it like this::

        result = compute(x, axis=0)

    ==========  =======
    column a    column b
    ==========  =======
    '''


def test_prose_sentences_keep_prose_and_drop_code_tables_and_headings():
    assert embedded_corpus.prose_sentences(DOCSTRING) == [
        "Compute the thing along an axis.",
        "The result is the thing of every element, taken over the flattened array by default.",
        "This is a second sentence.",
        "Axis along which the thing is computed.",  # a parameter's description is prose
        "The default is all axes.",
    ]


def test_corpus_file_is_deterministic_and_in_the_input_format(tmp_path):
    first = embedded_corpus.build_default_corpus(str(tmp_path / "a.txt"), max_bytes=300_000)
    embedded_corpus.build_default_corpus(str(tmp_path / "b.txt"), max_bytes=300_000)
    text = (tmp_path / "a.txt").read_text(encoding="utf-8")
    assert text == (tmp_path / "b.txt").read_text(encoding="utf-8")
    assert 250_000 < first["bytes"] <= 300_000 and first["bytes"] == len(text.encode())
    documents = text.split("\n\n")[:-1]
    assert len(documents) == first["documents"] and text.endswith("\n\n")
    lines = [line for doc in documents for line in doc.split("\n")]
    # One sentence per line, no repeats.
    assert len(lines) == first["sentences"] and len(set(lines)) == len(lines)
    assert all(line[-1] in ".!?" and ">>>" not in line for line in lines)


def test_ensure_default_pretraining_data_builds_once(tmp_path):
    kwargs = dict(max_seq_length=64, max_predictions_per_seq=10, vocab_size=1000, dupe_factor=1,
                  max_bytes=400_000)
    built = embedded_corpus.ensure_default_pretraining_data(str(tmp_path), **kwargs)
    files = [*built["train_files"], *built["eval_files"], built["vocab_file"]]
    assert all(os.path.getsize(f) > 0 for f in files)
    with open(built["vocab_file"], encoding="utf-8") as f:
        assert len(f.read().splitlines()) == 1000
    # about 1 document in EVAL_EVERY is held out
    train, held_out = (os.path.getsize(tmp_path / f"corpus_{s}.txt") for s in ("train", "eval"))
    assert 0.01 < held_out / (train + held_out) < 0.1
    stamps = [os.stat(f).st_mtime_ns for f in files]
    assert embedded_corpus.ensure_default_pretraining_data(str(tmp_path), **kwargs) == built
    assert [os.stat(f).st_mtime_ns for f in files] == stamps  # nothing rebuilt
