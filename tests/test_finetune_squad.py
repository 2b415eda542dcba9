"""SQuAD fine-tuning end to end on a tiny model and a few paragraphs made here."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from glue_runs import WORDS, write_checkpoints

from bert_jax.checkpoints import load_model, read_checkpoint
from bert_jax.model import BertForQuestionAnswering
from bert_jax.tasks import squad, squad_data
from configs import squad as squad_configs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_squad_file(path, version_2: bool, num_paragraphs=12, seed=0) -> str:
    """Paragraphs of vocabulary words; the answer to "who ?" is the word after "by"."""
    rng = np.random.default_rng(seed)
    data = []
    for p in range(num_paragraphs):
        words = list(rng.choice(WORDS[5:], size=20))
        at = int(rng.integers(2, 16))
        words[at] = "by"
        context = " ".join(words)
        answer_start = len(" ".join(words[:at + 1])) + 1
        qas = [{"id": f"p{p}", "question": "who was it by ?",
                "answers": [{"text": words[at + 1], "answer_start": answer_start}]}]
        if version_2:
            qas.append({"id": f"p{p}-none", "question": "the plot ?", "answers": [],
                        "is_impossible": True})
        data.append({"title": f"t{p}", "paragraphs": [{"context": context, "qas": qas}]})
    with open(path, "w") as f:
        json.dump({"version": "v2.0" if version_2 else "1.1", "data": data}, f)
    return str(path)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return write_checkpoints(tmp_path_factory.mktemp("squad") / "ckpt")


def config_for(preset, train_file, checkpoint, **overrides):
    config = squad_configs.get_config(preset)
    config.update(train_file=train_file, predict_file=train_file, init_checkpoint=checkpoint,
                  max_seq_length=48, doc_stride=16, max_query_length=8, train_batch_size=8,
                  predict_batch_size=8, learning_rate=1e-3, num_train_epochs=3.0, log_every=2,
                  progress_bar=False)
    config.update(overrides)
    return config


@pytest.mark.parametrize("preset", ["v1", "v2"])
def test_train_predict_and_score(tmp_path, checkpoints, preset):
    data = write_squad_file(tmp_path / "squad.json", version_2=preset == "v2")
    results = squad.train_and_evaluate(
        config_for(preset, data, checkpoints["bert_jax"]), str(tmp_path / "run"))
    run = tmp_path / "run"
    answers = json.loads((run / "predictions.json").read_text())
    nbest = json.loads((run / "nbest_predictions.json").read_text())
    assert set(answers) == set(nbest) and len(answers) == (24 if preset == "v2" else 12)
    assert all(1 <= len(entries) <= 20 for entries in nbest.values())
    assert all(abs(sum(e["probability"] for e in entries) - 1) < 1e-6
               for entries in nbest.values())
    if preset == "v1":
        assert set(results) >= {"exact_match", "f1"}
    else:
        assert set(results) >= {"exact", "f1", "HasAns_exact", "NoAns_f1", "best_f1",
                                "best_f1_thresh"}
        assert set(json.loads((run / "null_odds.json").read_text())) == set(answers)
        assert (run / "predictions_best_threshold.json").exists()
    # The run's scores are the official script's on its own predictions.
    official = subprocess.run([sys.executable, "-m", "bert_jax.squad_eval", data,
                               str(run / "predictions.json")]
                              + (["--na-prob-file", str(run / "null_odds.json")]
                                 if preset == "v2" else []),
                              cwd=REPO, capture_output=True, text=True, check=True)
    for key, value in json.loads(official.stdout).items():
        assert results[key] == value, key
    assert json.loads((run / "eval_results.json").read_text())["f1"] == results["f1"]
    # Conversion is cached: a second run finds the features.
    assert len(list((run / "features").glob("*.pkl"))) == 2


def test_exported_span_model_gives_the_same_logits_in_transformers(tmp_path, checkpoints):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    data = write_squad_file(tmp_path / "squad.json", version_2=False, num_paragraphs=4)
    squad.train_and_evaluate(config_for("v1", data, checkpoints["hf"], num_train_epochs=1.0),
                             str(tmp_path / "run"))
    assert read_checkpoint(str(tmp_path / "run" / "best")).task.architecture == (
        "BertForQuestionAnswering")
    subprocess.run([sys.executable, "-m", "bert_jax.convert", "--input",
                    str(tmp_path / "run" / "best"), "--input_format", "bert_jax", "--output",
                    str(tmp_path / "hf"), "--output_format", "hf"], cwd=REPO, check=True)
    hf, info = transformers.BertForQuestionAnswering.from_pretrained(
        tmp_path / "hf", output_loading_info=True, local_files_only=True)
    assert not any(info.values()), info
    ours = load_model(str(tmp_path / "run" / "best"), BertForQuestionAnswering)
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 30, (2, 16))
    types = np.zeros((2, 16), np.int64)
    mask = np.ones((2, 16), np.int64)
    start, end = ours(ids, types, mask)
    with torch.no_grad():
        out = hf(input_ids=torch.tensor(ids), token_type_ids=torch.tensor(types),
                 attention_mask=torch.tensor(mask))
    np.testing.assert_allclose(out.start_logits.numpy(), np.asarray(start), atol=1e-5)
    np.testing.assert_allclose(out.end_logits.numpy(), np.asarray(end), atol=1e-5)


def test_answers_not_at_answer_start_are_skipped_and_counted(tmp_path):
    data = [{"paragraphs": [{"context": "the tower was built by eiffel", "qas": [
        {"id": "ok", "question": "who ?", "answers": [{"text": "eiffel", "answer_start": 23}]},
        {"id": "off", "question": "who ?", "answers": [{"text": "eiffel", "answer_start": 4}]},
    ]}]}]
    report = squad_data.ReadReport()
    examples = squad_data.read_examples(data, is_training=True, version_2_with_negative=False,
                                        report=report)
    assert [e.qas_id for e in examples] == ["ok"] and report.skipped == ["off"]
    with pytest.raises(ValueError, match=r"data\[0\].paragraphs\[0\].qas\[0\]: no 'question'"):
        squad_data.read_examples([{"paragraphs": [{"context": "x", "qas": [{"id": "a"}]}]}],
                                 is_training=False, version_2_with_negative=False)
    (tmp_path / "bad.json").write_text('{"version": "1.1", "data": [')
    with pytest.raises(ValueError, match="bad.json: not valid JSON"):
        squad_data.load_squad_json(str(tmp_path / "bad.json"))
