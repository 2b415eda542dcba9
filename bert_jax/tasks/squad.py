"""SQuAD v1.1 / v2.0 fine-tuning: windows in, predictions decoded as run_squad, official scores.

    from bert_jax.tasks import squad
    squad.train_and_evaluate(config, workdir)   # configs/squad.py:v1 or :v2

Training minimises the mean of the start and end cross-entropies over the
windows of config.train_file (squad_data); each epoch ends with the
predict_file decoded (squad_decoding) and scored by the official formulas
(squad_metrics). The best checkpoint's predictions.json,
nbest_predictions.json and, for v2, null_odds.json land in WORKDIR, with the
official keys in eval_results.json; for v2 also the answers re-written at the
best threshold (predictions_best_threshold.json), without running the model
again.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle

import jax
import jax.numpy as jnp
import ml_collections
import optax

from bert_jax.checkpoints import read_checkpoint
from bert_jax.checkpoints.flat_params import TaskHead
from bert_jax.fileio.atomic_output import atomic_file
from bert_jax.model import BertForQuestionAnswering
from bert_jax.tasks import squad_data, squad_decoding, squad_metrics
from bert_jax.training import finetuning
from bert_jax.training.preemption import Preemption
from bert_jax.training.reporting import report
from bert_jax.training.run_config import check_batch_split, check_positive, fail


def validate(config: ml_collections.ConfigDict) -> None:
    """Field checks before anything is read (each error names its field)."""
    check_positive(config, "config", ("max_seq_length", "doc_stride", "max_query_length",
                                       "train_batch_size", "predict_batch_size", "n_best_size",
                                       "max_answer_length", "learning_rate", "log_every"))
    check_batch_split("train_batch_size", config.train_batch_size, 1, config.mesh.tensor)
    check_batch_split("predict_batch_size", config.predict_batch_size, 1, config.mesh.tensor)
    if config.max_query_length + 3 >= config.max_seq_length:
        fail("max_query_length", f"{config.max_query_length} leaves no room for the document "
             f"in max_seq_length {config.max_seq_length}")
    if not (config.do_train or config.do_predict):
        fail("do_train", "neither do_train nor do_predict is set")
    for field in (("train_file",) if config.do_train else ()) + (
            ("predict_file",) if config.do_predict else ()):
        if not os.path.isfile(config[field]):
            fail(field, f"{config[field]!r} is not a file")
    if not config.init_checkpoint or not os.path.exists(config.init_checkpoint):
        fail("init_checkpoint", f"{config.init_checkpoint!r} does not exist")


def _cached(config, workdir: str, path: str, tokenizer, is_training: bool):
    """(examples, features, report) of one file, converted once per file and settings."""
    stat = os.stat(path)
    settings = dict(path=os.path.abspath(path), size=stat.st_size, mtime=stat.st_mtime_ns,
                    vocab=_file_digest(tokenizer.vocab_file),
                    do_lower_case=tokenizer.do_lower_case, is_training=is_training,
                    v2=config.version_2_with_negative, max_seq_length=config.max_seq_length,
                    doc_stride=config.doc_stride, max_query_length=config.max_query_length)
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:20]
    cache = os.path.join(config.cache_dir or os.path.join(workdir, "features"), f"{key}.pkl")
    if os.path.exists(cache):
        with open(cache, "rb") as f:
            return pickle.load(f)
    read = squad_data.ReadReport()
    data = squad_data.load_squad_json(path)
    examples = squad_data.read_examples(
        data["data"], is_training=is_training, source=path, report=read,
        version_2_with_negative=config.version_2_with_negative)
    features = squad_data.convert_examples(
        examples, tokenizer, max_seq_length=config.max_seq_length, doc_stride=config.doc_stride,
        max_query_length=config.max_query_length, is_training=is_training)
    if read.skipped:
        report(f"{path}: {len(read.skipped)} questions skipped (answer text not at answer_start)")
    result = (data, examples, features)
    if jax.process_index() == 0:
        with atomic_file(cache, overwrite=True, mode="wb") as f:
            pickle.dump(result, f, protocol=pickle.HIGHEST_PROTOCOL)
    return result


def _file_digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def model_inputs(batch: dict) -> dict:
    return dict(input_ids=batch["input_ids"], token_type_ids=batch["segment_ids"],
                attention_mask=batch["input_mask"])


def span_loss(logits, batch):
    """run_squad's loss: the mean of the start and end cross-entropies."""
    start_logits, end_logits = (x.astype(jnp.float32) for x in logits)
    start = optax.softmax_cross_entropy_with_integer_labels(start_logits, batch["start_positions"])
    end = optax.softmax_cross_entropy_with_integer_labels(end_logits, batch["end_positions"])
    return jnp.mean((start + end) / 2.0), {}


def _arrays(features: squad_data.SquadFeatures) -> dict:
    return {"input_ids": features.input_ids, "segment_ids": features.segment_ids,
            "input_mask": features.input_mask, "length": features.length,
            "start_positions": features.start_positions, "end_positions": features.end_positions}


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict:
    """Fine-tunes (do_train) and predicts (do_predict); returns eval_results.json's content."""
    preemption = Preemption()
    validate(config)
    workdir = os.path.abspath(workdir)
    checkpoint = read_checkpoint(config.init_checkpoint)
    model_config = checkpoint.config.replace(dtype=config.dtype)
    tokenizer = finetuning.checkpoint_tokenizer(config, checkpoint)
    predict_set = (_cached(config, workdir, config.predict_file, tokenizer, False)
                   if config.do_predict else None)
    v2 = config.version_2_with_negative

    def decode(predict, threshold=config.null_score_diff_threshold):
        data, examples, features = predict_set
        start_logits, end_logits = predict(_arrays(features))
        return squad_decoding.write_predictions(
            examples, features, start_logits, end_logits, n_best_size=config.n_best_size,
            max_answer_length=config.max_answer_length, do_lower_case=tokenizer.do_lower_case,
            version_2_with_negative=v2, null_score_diff_threshold=threshold)

    def official(predictions: squad_decoding.Predictions) -> dict:
        data = predict_set[0]["data"]
        if v2:
            # As google-research/bert's README runs evaluate-v2.0.py: null_odds.json as the
            # no-answer file, so best_f1_thresh is in the units of null_score_diff_threshold.
            return squad_metrics.evaluate_v2(data, predictions.answers, predictions.null_odds,
                                             1.0)
        return squad_metrics.evaluate_v1(data, predictions.answers)

    def evaluate(predict) -> dict:
        scores = official(decode(predict)) if predict_set else {}
        return {k: float(v) for k, v in scores.items() if not k.endswith("total")}

    spec = finetuning.FineTuneSpec(
        model_config=model_config,
        make_model=lambda cfg, rngs: BertForQuestionAnswering(cfg, rngs=rngs),
        head_prefixes=("qa_outputs/",), model_inputs=model_inputs, loss=span_loss,
        train_features={}, evaluate=evaluate, main_metric="f1",
        init_params=checkpoint.params, vocab_file=config.vocab_file or checkpoint.vocab_file,
        do_lower_case=tokenizer.do_lower_case, head=TaskHead("BertForQuestionAnswering"),
        task_name="squad_v2" if v2 else "squad_v1.1")
    if config.do_train:
        _, examples, features = _cached(config, workdir, config.train_file, tokenizer, True)
        report(f"{config.train_file}: {len(examples)} questions, {len(features.tokens)} windows")
        spec = dataclasses.replace(spec, train_features=_arrays(features))
        result = finetuning.run(spec, config, workdir, preemption)
        if result.preempted:
            return {}
        predict = result.predict
    else:
        predict = finetuning.load_predictor(spec, config, config.init_checkpoint)
    if not predict_set:
        return finetuning.read_results(workdir)

    predictions = decode(predict)
    results = official(predictions)
    files = {"predictions.json": predictions.answers,
             "nbest_predictions.json": predictions.nbest}
    if v2:
        files["null_odds.json"] = predictions.null_odds
        # The paper tunes the threshold on dev: the answers at the best one, no model run.
        files["predictions_best_threshold.json"] = squad_decoding.apply_threshold(
            predictions, results["best_f1_thresh"])
    summary = {**finetuning.read_results(workdir), **results}
    files[finetuning.RESULTS_FILE] = summary
    if jax.process_index() == 0:
        for name, value in files.items():
            with atomic_file(os.path.join(workdir, name), overwrite=True) as f:
                json.dump(value, f, indent=2)
    report("official scores: " + " ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                                           for k, v in results.items()))
    return summary

