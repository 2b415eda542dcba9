"""Fine-tune BERT on a GLUE task (or your own sentence(-pair) TSV/CSV task).

    python -m bert_jax.finetune_glue --config configs/glue.py:mrpc --workdir /tmp/mrpc \
        --config.data_dir=GLUE_DIR --config.init_checkpoint=CKPT [--config.x=y ...]

CKPT: a bert_jax folder (a pretraining run's export/), a Hugging Face folder
or a google-research/bert bert_model.ckpt. The workdir ends up with
eval_results.json, best/ (the best checkpoint by the task's main metric),
predictions/<Task>.tsv (GLUE leaderboard format), metrics.jsonl,
tensorboard/ and checkpoints/ (resume by running the same command again;
SIGTERM saves and exits 0).
"""
from bert_jax.tasks.glue import train_and_evaluate
from bert_jax.training import entry

if __name__ == "__main__":
    entry.run(train_and_evaluate, "configs/glue.py:mrpc")
