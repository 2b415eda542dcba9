"""Shared pytest fixtures."""
import os
import pathlib

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
# ../shared beside the checkout holds real data for parity checks; a user's fresh
# clone may not have it, so tests that need it skip with a reason.
SHARED_DIR = pathlib.Path(os.environ.get("BERT_JAX_SHARED", REPO_ROOT.parent / "shared"))


@pytest.fixture(scope="session")
def shared_data() -> pathlib.Path:
    """Path to ../shared/data; skips the test when it is absent."""
    data = SHARED_DIR / "data"
    if not data.is_dir():
        pytest.skip(f"{data} is absent (real reference data lives beside the checkout in "
                    "../shared)")
    return data


@pytest.fixture(scope="session")
def random_data(tmp_path_factory) -> pathlib.Path:
    """A folder of small random pretraining TFRecords (see pretrain_runs.py)."""
    from pretrain_runs import make_random_data

    return make_random_data(tmp_path_factory.mktemp("random_data"))
