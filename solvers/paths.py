"""Where the shipped data lives: inside the wheel (solvers/data/) or in the source tree."""
from __future__ import annotations

import errno
import os
import stat
import sys
from pathlib import Path

TYPE_CHECKING = False  # typing.TYPE_CHECKING as mypy reads it: `list` reaches this module, and typing costs it ms
if TYPE_CHECKING:
    from typing import BinaryIO

_PACKAGE = Path(__file__).resolve().parent
# A wheel carries hardware.yaml, models.yaml and questions/ under solvers/data/;
# a source checkout (editable install, tests) keeps them at the repository root.
DATA_ROOT = _PACKAGE / "data" if (_PACKAGE / "data").is_dir() else _PACKAGE.parent


def data_file(name: str) -> Path:
    return DATA_ROOT / name


def questions_dir() -> Path:
    return DATA_ROOT / "questions"


def question_files(root: Path) -> list[Path]:
    """A bank's question files under `root`, in the order every load reads them."""
    return sorted(root.glob("**/*.yaml"))


def user_config_dir() -> Path:
    """The user's own hardware.yaml / models.yaml live here (INFRADRILL_CONFIG_DIR overrides)."""
    override = os.environ.get("INFRADRILL_CONFIG_DIR")
    if override:
        return Path(override)
    from platformdirs import user_config_dir as platform_config_dir

    return Path(platform_config_dir("infradrill"))


def user_cache_dir() -> Path:
    """Where the parsed bank is cached between runs (INFRADRILL_CACHE_DIR overrides)."""
    override = os.environ.get("INFRADRILL_CACHE_DIR")
    if override:
        return Path(override)
    if sys.platform == "linux":
        # platformdirs' rule on Linux (XDG), said here so that `infradrill list` does not import it
        # (with tempfile and copy, a sixth of that command). Were the two ever to differ, a cache
        # is only a cache: the cost is one cold load.
        xdg = os.environ.get("XDG_CACHE_HOME", "")
        return Path(xdg if os.path.isabs(xdg) else os.path.expanduser("~/.cache")) / "infradrill"
    from platformdirs import user_cache_dir as platform_cache_dir

    return Path(platform_cache_dir("infradrill"))


def open_regular(path: Path | str) -> BinaryIO:
    """`path` open for reading in binary, where it is a regular file (through any links); OSError
    where it is not one or cannot be opened. The open does not block: a FIFO would wait for a
    writer for ever, and a device or a directory is no file of ours either."""
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a FIFO, a device or a directory)", str(path))
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise
