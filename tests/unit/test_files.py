"""fastpipe/files.py: a file is replaced whole or left as it was, and one process holds a lock at a time."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from fastpipe.files import LockBusy, atomic_write, commit, file_lock

# A process that holds the lock on argv[1] (writing "child" as its owner) until its stdin closes.
HOLDER = """
import sys
from fastpipe.files import file_lock
with file_lock(sys.argv[1], owner="child"):
    print("held", flush=True)
    sys.stdin.read()
"""


def leftovers(folder):
    return [p.name for p in folder.iterdir() if ".tmp-" in p.name]


def test_bytes_text_and_a_writer_each_become_the_whole_file(tmp_path):
    target = tmp_path / "out.bin"
    atomic_write(target, b"\x00\xffbytes")
    assert target.read_bytes() == b"\x00\xffbytes"
    atomic_write(target, "text, ±1 as UTF-8")
    assert target.read_bytes() == "text, ±1 as UTF-8".encode()
    atomic_write(target, lambda fh: [fh.write(b"%d," % i) for i in range(3)])
    assert target.read_bytes() == b"0,1,2," and leftovers(tmp_path) == []


def test_a_writer_that_raises_leaves_the_old_file_and_no_temporary_file(tmp_path):
    target = tmp_path / "metrics.json"
    target.write_text('{"old": 1}')

    def half_then_fail(fh):
        fh.write(b'{"new": ')
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        atomic_write(target, half_then_fail)
    assert json.loads(target.read_text()) == {"old": 1} and leftovers(tmp_path) == []


def test_before_replace_sees_the_complete_temporary_file_while_the_target_is_still_old(tmp_path):
    target, seen = tmp_path / "step.pt", []
    target.write_bytes(b"old")
    atomic_write(target, b"new", before_replace=lambda tmp: seen.append((tmp.name, tmp.read_bytes(),
                                                                          target.read_bytes())))
    assert seen == [(f".step.pt.tmp-{os.getpid()}", b"new", b"old")] and target.read_bytes() == b"new"


def test_fsync_and_sync_folder_sync_the_file_then_the_folder(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync

    def record(fd):
        synced.append("folder" if os.path.isdir(f"/proc/self/fd/{fd}") else "file")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", record)
    atomic_write(tmp_path / "a", b"1", fsync=False)
    assert synced == []
    atomic_write(tmp_path / "a", b"2")
    assert synced == ["file"]
    atomic_write(tmp_path / "a", b"3", sync_folder=True)
    assert synced == ["file", "file", "folder"]
    tmp = tmp_path / ".b.partial"
    with open(tmp, "wb") as fh:  # a file written over time (a pack), then committed
        fh.write(b"pack")
        commit(fh, tmp, tmp_path / "b")
    assert synced[-2:] == ["file", "folder"] and (tmp_path / "b").read_bytes() == b"pack" and not tmp.exists()


def test_a_lock_held_by_another_process_is_busy_until_that_process_dies(tmp_path):
    lock = tmp_path / ".pack.lock"
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(LockBusy) as busy:
            with file_lock(lock, wait=False):
                pass
        assert busy.value.holder == "child"
        told, got = [], threading.Event()

        def waiter():
            with file_lock(lock, on_wait=told.append, owner="waiter") as waited:
                got.set()
                assert waited

        thread = threading.Thread(target=waiter)
        thread.start()
        assert not got.wait(0.3) and told == ["child"]  # it waits, having been told who holds the lock
        child.send_signal(signal.SIGKILL)  # the kernel drops a dead holder's lock
        assert got.wait(10)
        thread.join(10)
    finally:
        child.kill()
        child.wait()
    with file_lock(lock, wait=False) as waited:  # free again, and the last holder's owner text is there
        assert not waited and lock.read_text() == "waiter"


def test_two_threads_never_hold_one_lock_together(tmp_path):
    lock, inside, overlaps = tmp_path / ".lock", [], []

    def work():
        for _ in range(20):
            with file_lock(lock):
                inside.append(1)
                overlaps.append(len(inside))
                inside.pop()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(overlaps) == 80 and max(overlaps) == 1


def test_a_lock_is_released_on_exit_even_when_a_forked_child_keeps_its_descriptor(tmp_path):
    lock = tmp_path / ".run.lock"
    with file_lock(lock):
        pid = os.fork()
        if pid == 0:  # the child inherits the open lock file and outlives the block
            try:
                time.sleep(5)
            finally:
                os._exit(0)
    try:
        with file_lock(lock, wait=False):
            pass
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def test_a_forked_child_leaving_the_block_does_not_unlock_its_parents_lock(tmp_path):
    lock = tmp_path / ".run.lock"
    held = file_lock(lock)
    held.__enter__()
    try:
        pid = os.fork()
        if pid == 0:  # the child's copy of the block ends (as its interpreter would finalize it)
            try:
                held.__exit__(None, None, None)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        with pytest.raises(LockBusy):
            with file_lock(lock, wait=False):
                pass
    finally:
        held.__exit__(None, None, None)
