"""Fine-tuning tasks: one module per task (readers, features, metrics, outputs).

  glue   GLUE and a user's own TSV/CSV sentence(-pair) classification or regression

Each task builds on bert_jax.training (the shared fine-tuning core); tasks
never import each other.
"""
