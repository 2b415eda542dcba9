"""bert_jax: pretrain and fine-tune BERT with JAX and Flax NNX."""
