"""End to end: `python -m bert_jax.pretrain` trains, resumes exactly, survives kills."""
import os
import signal
import subprocess
import time

import jax
import numpy as np
import optax
import pytest
from flax import nnx
from pretrain_runs import PRED, REPO, SEQ, SMALL_MODEL, VOCAB, cli, config_with, small_overrides

from bert_jax import pretrain
from bert_jax.checkpoints import bert_jax_folder
from bert_jax.model.config import BertConfig
from bert_jax.model.task_models import BertForPreTraining
from bert_jax.pretraining.step import make_train_step
from bert_jax.training.metrics_writer import read_metrics
from bert_jax.training.state import init_train_state


def export_params(workdir):
    return bert_jax_folder.load(os.path.join(workdir, "export")).params


def test_killed_run_resumes_to_identical_params(tmp_path, random_data):
    overrides = small_overrides(random_data)
    overrides["data.eval_files"] = ""  # not needed here; saves a compilation per run
    straight = tmp_path / "straight"
    subprocess.run(cli(straight, overrides), cwd=REPO, check=True, capture_output=True)

    killed = tmp_path / "killed"
    proc = subprocess.Popen(cli(killed, overrides), cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    # Kill -9 once the step-4 checkpoint exists and training has moved past it.
    while time.time() < deadline:
        rows = read_metrics(killed)
        if rows and rows[-1]["step"] >= 6 and os.path.isdir(killed / "checkpoints" / "4"):
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / "export").exists(), "the run finished before it could be killed"

    resumed = subprocess.run(cli(killed, overrides), cwd=REPO, check=True, capture_output=True,
                             text=True)
    assert "resumed from the checkpoint at step" in resumed.stdout
    a, b = export_params(straight), export_params(killed)
    assert a.keys() == b.keys()
    for key in a:  # bit-exact: same batches, same dropout masks, same arithmetic
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    # metrics.jsonl describes one run: no step twice, every step once.
    steps = [row["step"] for row in read_metrics(killed) if "loss" in row]
    assert steps == list(range(1, 13))


def test_sigterm_saves_and_exits_zero(tmp_path, random_data):
    overrides = small_overrides(random_data, num_steps=100000, checkpoint_every=100000,
                                warmup_steps=10)
    proc = subprocess.Popen(cli(tmp_path, overrides), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    deadline = time.time() + 240
    while time.time() < deadline and not any(r["step"] >= 3 for r in read_metrics(tmp_path)):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    saved = [int(d) for d in os.listdir(tmp_path / "checkpoints") if d.isdigit()]
    assert len(saved) == 1 and saved[0] >= 3
    assert f"preempted: checkpoint at step {saved[0]} saved" in out


def test_corrupt_newest_checkpoint_falls_back_to_previous(tmp_path, random_data):
    overrides = small_overrides(random_data, num_steps=8, export_params=False)
    pretrain.train_and_evaluate(config_with(overrides), str(tmp_path))
    newest = tmp_path / "checkpoints" / "8" / "state"
    for root, _, files in os.walk(newest):  # damage every data file of step 8
        for name in files:
            if not name.startswith("_"):
                with open(os.path.join(root, name), "r+b") as f:
                    f.truncate(3)
    overrides["train.num_steps"] = 10
    pretrain.train_and_evaluate(config_with(overrides), str(tmp_path))
    assert 10 in [int(d) for d in os.listdir(tmp_path / "checkpoints") if d.isdigit()]
    steps = [row["step"] for row in read_metrics(tmp_path) if "loss" in row]
    assert steps == list(range(1, 11))  # steps 5..8 were redone from the step-4 checkpoint


def test_evaluation_and_metrics_file(tmp_path, random_data):
    overrides = small_overrides(random_data, num_steps=4, eval_every=2, export_params=False)
    pretrain.train_and_evaluate(config_with(overrides), str(tmp_path))
    rows = read_metrics(tmp_path)
    train_rows = [r for r in rows if "loss" in r]
    eval_rows = [r for r in rows if "eval_loss" in r]
    assert [r["step"] for r in eval_rows] == [2, 4]
    for key in ("loss", "mlm_loss", "mlm_accuracy", "nsp_accuracy", "learning_rate",
                "sequences_per_second"):
        assert all(np.isfinite(r[key]) for r in train_rows), key
    assert 0.0 <= eval_rows[-1]["eval_mlm_accuracy"] <= 1.0
    assert os.listdir(tmp_path / "tensorboard")


@pytest.mark.parametrize("override,field", [
    ({"train.batch_size": 12, "train.grad_accum_steps": 5}, "train.batch_size"),
    ({"data.max_seq_length": 64}, "data.max_seq_length"),
    ({"data.train_files": "/nonexistent/*.tfrecord"}, "data.train_files"),
    ({"train.optimizer": "sgd"}, "train.optimizer"),
    ({"data.max_predictions_per_seq": 7}, "data.max_predictions_per_seq"),
    ({"model.max_position_embeddings": 16}, "data.max_seq_length"),
    ({"train.init_checkpoint": "/nonexistent/ckpt"}, "train.init_checkpoint"),
    ({"train.num_steps": 1, "train.warmup_steps": 0, "train.init_mode": "partial"},
     "train.init_mode"),
])
def test_bad_config_fails_before_compute_naming_the_field(tmp_path, random_data, override,
                                                           field):
    overrides = {**small_overrides(random_data), **override}
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        pretrain.train_and_evaluate(config_with(overrides), str(tmp_path))
    assert not (tmp_path / "checkpoints").exists()


def test_unknown_field_on_the_command_line_is_named(tmp_path, random_data):
    args = cli(tmp_path, {**small_overrides(random_data), "train.bacth_size": 8})
    result = subprocess.run(args, cwd=REPO, capture_output=True, text=True)
    assert result.returncode != 0
    assert "bacth_size" in result.stderr
    assert not (tmp_path / "checkpoints").exists()


def test_gradient_accumulation_equals_one_big_batch():
    config = BertConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **SMALL_MODEL)
    model = BertForPreTraining(config, rngs=nnx.Rngs(0))
    graphdef = nnx.graphdef(model)
    params = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    optimizer = optax.sgd(0.1)
    rng = np.random.default_rng(0)
    batch = {
        "input_ids": rng.integers(5, VOCAB, (8, SEQ)).astype(np.int32),
        "segment_ids": np.zeros((8, SEQ), np.int32),
        "input_mask": np.ones((8, SEQ), np.int32),
        "masked_lm_positions": rng.integers(1, SEQ, (8, PRED)).astype(np.int32),
        "masked_lm_ids": rng.integers(5, VOCAB, (8, PRED)).astype(np.int32),
        # Uneven weights: averaging micro-batch losses would be wrong here.
        "masked_lm_weights": (rng.random((8, PRED)) < 0.5).astype(np.float32),
        "next_sentence_labels": rng.integers(0, 2, (8,)).astype(np.int32),
    }
    results = []
    for k in (1, 4):
        step = jax.jit(make_train_step(graphdef, optimizer, lambda s: 0.1, grad_accum_steps=k))
        state, metrics = step(init_train_state(params, optimizer, seed=0), batch)
        results.append((state["params"], metrics))
    (p1, m1), (p4, m4) = results
    np.testing.assert_allclose(m1["loss"], m4["loss"], rtol=1e-5)
    np.testing.assert_allclose(m1["grad_norm"], m4["grad_norm"], rtol=1e-4)
    for a, b in zip(jax.tree.leaves(p1), jax.tree.leaves(p4)):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_non_finite_loss_stops_naming_the_step(tmp_path, random_data):
    # A learning rate of 1e30 blows the weights up within a few steps.
    overrides = small_overrides(random_data, learning_rate=1e30, num_steps=40,
                                checkpoint_every=2, export_params=False)
    with pytest.raises(FloatingPointError, match=r"at step \d+"):
        pretrain.train_and_evaluate(config_with(overrides), str(tmp_path))
    # Whatever was saved holds finite parameters.
    from bert_jax.checkpoints.train_state import load_pytree
    latest = max(int(d) for d in os.listdir(tmp_path / "checkpoints") if d.isdigit())
    state = load_pytree(str(tmp_path / "checkpoints" / str(latest) / "state"))
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(state["params"]))


def test_learns_on_google_bert_tfrecords(tmp_path, shared_data):
    overrides = {"data.train_files": str(shared_data / "google_bert" / "speeches_seq128.tfrecord"),
                 "data.default_corpus": False, "data.shuffle_buffer": 1000,
                 "model.vocab_size": 30522, "model.hidden_size": 64,
                 "model.intermediate_size": 128, "model.num_attention_heads": 2,
                 "train.batch_size": 16, "train.num_steps": 120, "train.warmup_steps": 10,
                 "train.log_every": 1, "train.checkpoint_every": 1000, "train.eval_every": 0,
                 "train.export_params": False}
    pretrain.train_and_evaluate(config_with(overrides), str(tmp_path))
    rows = [r for r in read_metrics(tmp_path) if "loss" in r]
    start = rows[0]["mlm_accuracy"]  # a random model: ~1/30522
    end = np.mean([r["mlm_accuracy"] for r in rows[-20:]])
    assert start < 0.01 and end > 0.04, (start, end)
    assert np.mean([r["loss"] for r in rows[-20:]]) < rows[0]["loss"] - 2.0


@pytest.mark.parametrize("init_mode", ["params", "full"])
def test_phase2_starts_from_phase1_at_a_longer_sequence(tmp_path, random_data, init_mode):
    phase1 = tmp_path / "phase1"
    pretrain.train_and_evaluate(config_with(small_overrides(random_data, num_steps=4)),
                                str(phase1))
    trained = export_params(phase1)
    init = str(phase1 / "export") if init_mode == "params" else str(phase1)
    overrides = small_overrides(random_data, num_steps=3, init_checkpoint=init,
                                init_mode=init_mode, export_params=False)
    overrides.update({"data.train_files": str(random_data / "train_long.tfrecord"),
                      "data.eval_files": "", "data.max_seq_length": 2 * SEQ,
                      "data.max_predictions_per_seq": 2 * PRED})
    phase2 = tmp_path / "phase2"
    pretrain.train_and_evaluate(config_with(overrides), str(phase2))
    rows = [r for r in read_metrics(phase2) if "loss" in r]
    assert [r["step"] for r in rows] == [1, 2, 3]  # the step restarts at 0
    fresh = tmp_path / "fresh"
    overrides.update({"train.init_checkpoint": ""})
    pretrain.train_and_evaluate(config_with(overrides), str(fresh))
    fresh_rows = [r for r in read_metrics(fresh) if "loss" in r]
    assert rows[0]["loss"] != fresh_rows[0]["loss"]
    # The phase-2 workdir's step-3 checkpoint descends from phase 1's weights.
    from bert_jax.checkpoints.train_state import load_pytree
    state = load_pytree(str(phase2 / "checkpoints" / "3" / "state"))
    word = np.asarray(state["params"]["bert"]["embeddings"]["word_embeddings"]["embedding"])
    start = trained["bert/embeddings/word_embeddings/embedding"]
    assert np.abs(word - start).max() < 0.02  # three small steps away, not a fresh draw
    counts = [np.asarray(x) for path, x in jax.tree_util.tree_flatten_with_path(
        state["opt_state"])[0] if "count" in jax.tree_util.keystr(path)]
    assert counts and all(c == 3 for c in counts)  # the schedule restarted at 0


def test_bf16_compute_trains_with_fp32_params_and_optimizer_state(tmp_path, random_data):
    overrides = small_overrides(random_data, num_steps=4, export_params=False)
    overrides["model.dtype"] = "bfloat16"
    pretrain.train_and_evaluate(config_with(overrides), str(tmp_path))
    rows = [r for r in read_metrics(tmp_path) if "loss" in r]
    assert all(np.isfinite(r["loss"]) for r in rows)
    from bert_jax.checkpoints.train_state import load_pytree
    state = load_pytree(str(tmp_path / "checkpoints" / "4" / "state"))
    floats = [x for x in jax.tree.leaves((state["params"], state["opt_state"]))
              if np.issubdtype(np.asarray(x).dtype, np.floating)]
    assert floats and all(np.asarray(x).dtype == np.float32 for x in floats)


def test_learns_on_our_own_files_with_dynamic_masking(tmp_path, shared_data):
    from bert_jax.pretraining.data_creation import create_pretraining_data
    from bert_jax.tokenization import FullTokenizer, train_wordpiece_vocab

    corpus = shared_data / "corpus" / "us_presidential_speeches.txt"
    vocab = train_wordpiece_vocab(str(corpus), 2000, True, tmp_path / "vocab.txt")
    tokenizer = FullTokenizer(str(vocab), do_lower_case=True)
    num_tokens = len(tokenizer.vocab)
    create_pretraining_data(str(corpus), str(tmp_path / "train.tfrecord"), tokenizer,
                            max_seq_length=64, dupe_factor=1, unmasked=True)
    overrides = {"data.train_files": str(tmp_path / "train.tfrecord"),
                 "data.default_corpus": False, "data.dynamic_masking": True,
                 "data.vocab_file": str(vocab), "data.max_seq_length": 64,
                 "data.max_predictions_per_seq": 10, "data.shuffle_buffer": 1000,
                 "model.vocab_size": num_tokens, "model.hidden_size": 64,
                 "model.intermediate_size": 128, "model.num_attention_heads": 2,
                 "train.batch_size": 32, "train.num_steps": 150, "train.warmup_steps": 10,
                 "train.log_every": 1, "train.checkpoint_every": 1000, "train.eval_every": 0,
                 "train.export_params": False}
    pretrain.train_and_evaluate(config_with(overrides), str(tmp_path / "run"))
    rows = [r for r in read_metrics(tmp_path / "run") if "loss" in r]
    start = rows[0]["mlm_accuracy"]  # a random model: ~1/2000
    end = np.mean([r["mlm_accuracy"] for r in rows[-20:]])
    assert start < 0.01 and end > 0.035, (start, end)
    assert np.mean([r["loss"] for r in rows[-20:]]) < rows[0]["loss"] - 1.0


def test_init_checkpoint_trained_with_another_activation_is_refused(tmp_path, random_data):
    checkpoint = tmp_path / "ckpt"
    (checkpoint / "params").mkdir(parents=True)
    BertConfig(hidden_act="gelu", **SMALL_MODEL).to_json_file(str(checkpoint / "config.json"))
    overrides = small_overrides(random_data, init_checkpoint=str(checkpoint))
    assert config_with(overrides).model.hidden_act == "gelu_tanh"
    with pytest.raises(ValueError, match=r"model\.hidden_act.*'gelu'"):
        pretrain.train_and_evaluate(config_with(overrides), str(tmp_path / "run"))


def test_restarting_a_finished_run_changes_nothing(tmp_path, random_data):
    overrides = small_overrides(random_data, num_steps=3, log_every=5, eval_every=0)
    pretrain.train_and_evaluate(config_with(overrides), str(tmp_path))
    rows = read_metrics(tmp_path)
    pretrain.train_and_evaluate(config_with(overrides), str(tmp_path))
    assert read_metrics(tmp_path) == rows  # no second final eval
    # One step more after a restart (log_every not reached): logs, saves, exports.
    overrides["train.num_steps"] = 4
    pretrain.train_and_evaluate(config_with(overrides), str(tmp_path))
    assert [r["step"] for r in read_metrics(tmp_path) if "loss" in r] == [3, 4]
    assert 4 in [int(d) for d in os.listdir(tmp_path / "checkpoints") if d.isdigit()]
