"""The spawned trainer gets its settings from a file, not through the spawn pipe: CPython writes the
spawn payload while holding the pipe's read end, so a payload past the pipe's 64 KB (a dirty tree's
code.diff, up to 1 MB) and a child killed while it imports would block the launcher for ever."""
from __future__ import annotations

import dataclasses
import multiprocessing
import pickle

from conftest import TINY, make_settings

from fastpipe.launch import dispatch
from fastpipe.launch.handoff import read_settings, settings_file


def test_the_spawn_payload_stays_small_whatever_the_settings_carry(tmp_path, monkeypatch):
    settings = make_settings(TINY)
    settings.run_id = "abc"
    settings.context = dataclasses.replace(settings.context, code_diff="+" * 900_000)  # a large working-tree diff
    seen = {}

    class Recorded(multiprocessing.get_context("spawn").Process):
        def start(self):  # what the real start would pickle into the pipe, and the file beside it
            seen["payload"] = len(pickle.dumps((self._target, self._args)))
            seen["handed"] = read_settings(self._args[0])

        def join(self, timeout=None):
            pass

        @property
        def exitcode(self):
            return 0

        @property
        def pid(self):
            return 0

    class Context:
        Process = Recorded

    monkeypatch.setattr(dispatch.multiprocessing, "get_context", lambda method: Context)
    monkeypatch.setattr(dispatch, "collect", lambda run_dir, code, s: {"status": "ok"})
    dispatch._spawn_single(settings, tmp_path)
    assert seen["payload"] < 4096  # far below the pipe's 64 KB
    assert seen["handed"].context.code_diff == settings.context.code_diff and seen["handed"].run_id == "abc"
    assert not list(tmp_path.glob(".settings-*"))  # removed once the trainer has ended


def test_the_file_is_removed_when_the_launch_fails(tmp_path):
    settings = make_settings(TINY)
    try:
        with settings_file(settings, tmp_path) as path:
            assert read_settings(path).model == settings.model
            raise RuntimeError("the launch failed")
    except RuntimeError:
        pass
    assert not list(tmp_path.iterdir())
