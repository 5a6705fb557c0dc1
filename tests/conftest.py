from __future__ import annotations

import os
import tempfile

import pytest

# The tests never read the developer's own hardware.yaml / models.yaml additions.
os.environ["INFRADRILL_CONFIG_DIR"] = tempfile.mkdtemp(prefix="infradrill-config-")
# ...nor the developer's own progress store.
os.environ["INFRADRILL_DATA_DIR"] = tempfile.mkdtemp(prefix="infradrill-data-")
# ...nor its cache of the parsed bank.
os.environ["INFRADRILL_CACHE_DIR"] = tempfile.mkdtemp(prefix="infradrill-cache-")

from solvers.bank import load_bank
from solvers.data import load_catalog
from solvers.engine import VariantCode, make_variant


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    """A progress store and an (empty) config directory of the test's own (the app finds them through
    INFRADRILL_DATA_DIR and INFRADRILL_CONFIG_DIR): no test sees another's reviews or settings, a theme
    picked in one Pilot test included, whatever order they run in."""
    path = tmp_path / "data"
    monkeypatch.setenv("INFRADRILL_DATA_DIR", str(path))
    monkeypatch.setenv("INFRADRILL_CONFIG_DIR", str(tmp_path / "config"))
    return path


@pytest.fixture
def config_dir(data_dir):
    """The test's own config directory (data_dir's): where a test puts a user's hardware.yaml,
    models.yaml or settings.toml for the app to find."""
    path = data_dir.parent / "config"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture(scope="session")
def bank():
    return load_bank()


@pytest.fixture(scope="session")
def old_bank(bank):
    """The bank with one question in the old shape (tests.old_shape): the shape user packs may still have."""
    from tests.old_shape import with_old_shape

    return with_old_shape(bank)


@pytest.fixture(scope="session")
def catalog(tmp_path_factory):
    # An empty user config dir: the tests see the shipped data only.
    return load_catalog(user_dir=tmp_path_factory.mktemp("config"))


@pytest.fixture(scope="session")
def variant(bank, catalog):
    def make(code: str):
        return make_variant(bank, catalog, VariantCode.parse(code))

    return make
