"""Pretraining data and objective: from text to TFRecords to the MLM + NSP step.

Modules (imported by name; this file imports none, so that the step's import
path stays free of TensorFlow):
  text_sources     text files and TFDS datasets as documents of sentences
  sentence_split   one sentence per line, for corpora that are not split yet
  embedded_corpus  the default corpus built from documentation on this machine
  instances        google-research/bert's instance building and masking
  shard_worker     one shard of documents -> encoded records (worker process)
  data_creation    create_pretraining_data: shards, workers, outputs, summary
  record_spec      the TFRecord features and their lengths
  tfrecord_writer  TFRecord framing and tf.train.Example encoding in numpy
  input_pipeline   tf.data: files -> per-host batches (TensorFlow)
  dynamic_masking  masking in the pipeline, for unmasked files (TensorFlow)
  loss             MLM and NSP losses and metrics (google-research/bert's)
  step             the pure pretraining train and eval steps
  config_check     a pretraining config checked, its data files resolved
"""
