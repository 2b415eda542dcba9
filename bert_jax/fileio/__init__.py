"""Files: outputs written atomically (temp name, then rename), input patterns expanded.

Modules: `atomic_output` (atomic_file, atomic_directory, check_writable),
`file_patterns` (comma lists and globs, local or gs://).
"""
from bert_jax.fileio.atomic_output import atomic_directory, atomic_file, check_writable
from bert_jax.fileio.file_patterns import expand_file_patterns

__all__ = ["atomic_directory", "atomic_file", "check_writable", "expand_file_patterns"]
