"""Fine-tune BERT on SQuAD v1.1 or v2.0 and score it with the official formulas.

    python -m bert_jax.finetune_squad --config configs/squad.py:v1 --workdir /tmp/squad \
        --config.train_file=train-v1.1.json --config.predict_file=dev-v1.1.json \
        --config.init_checkpoint=CKPT [--config.do_train=False]

The workdir ends up with predictions.json, nbest_predictions.json (v2 also
null_odds.json and predictions_best_threshold.json), eval_results.json with
the official script's keys, best/ (the best checkpoint by F1),
metrics.jsonl, tensorboard/ and checkpoints/ (resume by running the same
command again; SIGTERM saves and exits 0).
"""
from bert_jax.tasks.squad import train_and_evaluate
from bert_jax.training import entry

if __name__ == "__main__":
    entry.run(train_and_evaluate, "configs/squad.py:v1")
