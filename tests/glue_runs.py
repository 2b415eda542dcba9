"""Tiny GLUE-layout data and tiny checkpoints in all three formats, made in the test."""
import json
import os

import numpy as np
from flax import nnx

from bert_jax.checkpoints import flat_params, write_checkpoint
from bert_jax.checkpoints.weight_names import export_tensor, weight_names
from bert_jax.model import BertConfig, BertForPreTraining

WORDS = ("good bad movie film plot actor scene story great awful fine dull the a an it was is "
         "very quite rather not really so and but with").split()
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=64, hidden_act="gelu")


def write_vocab(path) -> str:
    with open(path, "w") as f:
        f.write("\n".join(SPECIALS + list(WORDS)) + "\n")
    return str(path)


def tiny_config() -> BertConfig:
    return BertConfig(vocab_size=len(SPECIALS) + len(WORDS), **TINY)


def write_checkpoints(folder) -> dict:
    """The same random BertForPreTraining as bert_jax, hf and tf_v1 checkpoints (with vocab)."""
    folder = str(folder)
    os.makedirs(folder, exist_ok=True)
    vocab = write_vocab(os.path.join(folder, "vocab.txt"))
    config = tiny_config()
    flat = flat_params(BertForPreTraining(config, rngs=nnx.Rngs(7)))
    paths = {}
    for fmt in ("bert_jax", "hf"):
        paths[fmt] = os.path.join(folder, fmt)
        write_checkpoint(paths[fmt], fmt, config, flat, vocab_file=vocab)
    paths["tf_v1"] = write_google_bert_checkpoint(os.path.join(folder, "tf_v1"), config, flat,
                                                  vocab)
    return paths


def write_google_bert_checkpoint(folder, config, flat, vocab) -> str:
    """A TF v1 checkpoint under google-research/bert's names and layouts."""
    import tensorflow as tf

    os.makedirs(folder)
    tensors = {n.tf: export_tensor(n, flat[n.ours], "tf")
               for n in weight_names(config) if n.tf and n.ours in flat}
    graph = tf.Graph()
    with graph.as_default():
        variables = [tf.compat.v1.Variable(v, name=k) for k, v in tensors.items()]
        saver = tf.compat.v1.train.Saver(variables)
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            saver.save(sess, os.path.join(folder, "bert_model.ckpt"))
    bert_config = {k: v for k, v in config.to_dict().items()
                   if k not in ("dtype", "param_dtype", "layer_norm_eps")}
    # G-BERT's only GELU is the tanh form, under the name "gelu": this checkpoint
    # is read as gelu_tanh, which fine-tuning then uses.
    bert_config["hidden_act"] = "gelu"
    with open(os.path.join(folder, "bert_config.json"), "w") as f:
        json.dump(bert_config, f)
    with open(vocab) as src, open(os.path.join(folder, "vocab.txt"), "w") as dst:
        dst.write(src.read())
    return folder


def sentence(rng, positive: bool) -> str:
    words = list(rng.choice(WORDS[2:], size=rng.integers(3, 9)))
    words.insert(int(rng.integers(0, len(words) + 1)), "good" if positive else "bad")
    return " ".join(words)


def write_glue_folder(root, num_train=96, num_dev=40, num_test=24, seed=0) -> str:
    """SST-2, CoLA, MRPC and STS-B folders in GLUE's layout; labels follow the words."""
    rng = np.random.default_rng(seed)
    root = str(root)

    def rows(n):
        return [(sentence(rng, y == 1), sentence(rng, y == 1), y)
                for y in rng.integers(0, 2, size=n)]

    def write(path, header, lines):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            if header:
                f.write("\t".join(header) + "\n")
            for line in lines:
                f.write("\t".join(str(x) for x in line) + "\n")

    for split, n in (("train", num_train), ("dev", num_dev)):
        data = rows(n)
        write(f"{root}/SST-2/{split}.tsv", ["sentence", "label"], [(a, y) for a, _, y in data])
        write(f"{root}/CoLA/{split}.tsv", None, [("src", y, "", a) for a, _, y in data])
        write(f"{root}/MRPC/{split}.tsv", ["Quality", "#1 ID", "#2 ID", "#1 String",
                                           "#2 String"],
              [(y, i, i + 1, a, b) for i, (a, b, y) in enumerate(data)])
        write(f"{root}/STS-B/{split}.tsv",
              ["index", "genre", "filename", "year", "old_index", "source1", "source2",
               "sentence1", "sentence2", "score"],
              [(i, "g", "f", "y", i, "s", "s", a, b, f"{4.0 * y + 0.5:.3f}")
               for i, (a, b, y) in enumerate(data)])
    test = rows(num_test)
    write(f"{root}/SST-2/test.tsv", ["index", "sentence"], [(i, a) for i, (a, _, _) in
                                                             enumerate(test)])
    write(f"{root}/CoLA/test.tsv", ["index", "sentence"], [(i, a) for i, (a, _, _) in
                                                            enumerate(test)])
    write(f"{root}/MRPC/test.tsv", ["index", "#1 ID", "#2 ID", "#1 String", "#2 String"],
          [(i, i, i + 1, a, b) for i, (a, b, _) in enumerate(test)])
    write(f"{root}/STS-B/test.tsv",
          ["index", "genre", "filename", "year", "old_index", "source1", "source2",
           "sentence1", "sentence2"],
          [(i, "g", "f", "y", i, "s", "s", a, b) for i, (a, b, _) in enumerate(test)])
    return root


def write_mnli_folder(root, num_train=64, num_dev=24, num_test=12, seed=1) -> str:
    """MNLI (matched and mismatched dev/test) and the diagnostic set in GLUE's layout."""
    rng = np.random.default_rng(seed)
    root = str(root)
    labels = ("entailment", "neutral", "contradiction")
    header = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
              "sentence2_binary_parse", "sentence1_parse", "sentence2_parse", "sentence1",
              "sentence2"]

    def write(path, rows, with_label):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write("\t".join(header + (["label1", "gold_label"] if with_label else [])) + "\n")
            for i, (a, b, y) in enumerate(rows):
                cells = [str(i), "p", "q", "g", "(", "(", "(", "(", a, b]
                if with_label:
                    cells += [labels[y], labels[y]]
                f.write("\t".join(cells) + "\n")

    def rows(n):
        return [(sentence(rng, y == 0), sentence(rng, y == 0), int(y))
                for y in rng.integers(0, 3, size=n)]

    write(f"{root}/MNLI/train.tsv", rows(num_train), True)
    write(f"{root}/MNLI/dev_matched.tsv", rows(num_dev), True)
    write(f"{root}/MNLI/dev_mismatched.tsv", rows(num_dev), True)
    write(f"{root}/MNLI/test_matched.tsv", rows(num_test), False)
    write(f"{root}/MNLI/test_mismatched.tsv", rows(num_test + 1), False)
    os.makedirs(f"{root}/diagnostic", exist_ok=True)
    with open(f"{root}/diagnostic/diagnostic.tsv", "w") as f:
        f.write("index\tsentence1\tsentence2\n")
        for i, (a, b, _) in enumerate(rows(num_test + 2)):
            f.write(f"{i}\t{a}\t{b}\n")
    return root
