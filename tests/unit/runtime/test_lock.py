"""One run per folder (corl.runtime.lock): the kernel's flock, the holder named, a read-only folder."""

import os
import socket

import pytest

from corl.errors import CorlError
from corl.runtime import lock


def test_a_second_holder_is_refused_naming_the_first_and_the_lock_ends_with_the_block(tmp_path):
    with lock.holding(tmp_path / "run", "corl run x"):
        with pytest.raises(CorlError) as info:
            with lock.holding(tmp_path / "run", "corl run y"):
                pass
        assert str(info.value).startswith(f"{tmp_path / 'run'} is in use by another corl process (pid {os.getpid()} "
                                          f"on {socket.gethostname()}: corl run x, since ")
    with lock.holding(tmp_path / "run", "corl run y"):  # released
        pass


def test_a_disabled_lock_is_no_lock(tmp_path):
    with lock.holding(tmp_path, "rank 0"):
        with lock.holding(tmp_path, "rank 1", enabled=False):
            pass
