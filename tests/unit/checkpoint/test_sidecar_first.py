"""A checkpoint's sidecar is written before the file is published, and best.pt / last.pt are written
off the training thread by the background writer the step checkpoints use (issue 36; the red-team row
of issue 33: a kill -9 just after a checkpoint's rename discarded a complete file)."""
from __future__ import annotations

import shutil
import time

import torch
from conftest import TINY, cpu_runtime, make_settings

from fastpipe.checkpoint import disk
from fastpipe.checkpoint.disk import load_verified, resolve_candidates, rotate, verify, write_checkpoint


def _state(step: int) -> dict:
    return {"position": {"step": step}, "model": {"w": torch.full((4,), float(step))}}


def test_a_kill_just_before_or_just_after_the_rename_leaves_the_newest_complete_checkpoint(tmp_path, monkeypatch):
    folder, seen = tmp_path / "checkpoints", {}
    write_checkpoint(folder, _state(3))

    def kill_here(moment):  # what a kill -9 at this moment leaves on disk: the folder as it is now
        return lambda *args: seen.setdefault(moment, shutil.copytree(folder, tmp_path / moment))

    monkeypatch.setattr(disk, "_before_publish", kill_here("before"))  # the sidecar is written, the file not renamed
    monkeypatch.setattr(disk, "fsync_folder", kill_here("after"))  # renamed: the moment just after
    write_checkpoint(folder, _state(6))
    before, after = seen["before"], seen["after"]
    assert (before / "step-00000006.json").is_file() and not (before / "step-00000006.pt").exists()
    assert verify(after / "step-00000006.pt") is None  # complete, with its sidecar
    logged = []
    path, state = load_verified(resolve_candidates("auto", after), logged.append)
    assert path == after / "step-00000006.pt" and state["position"]["step"] == 6 and not logged
    path, state = load_verified(resolve_candidates("auto", before), logged.append)
    assert path == before / "step-00000003.pt" and state["position"]["step"] == 3
    rotate(before, keep=3)  # the sidecar whose file was never published is removed, the rest kept
    kept = sorted(p.name for p in before.iterdir() if ".tmp-" not in p.name)  # (this live process's own temporary)
    assert kept == ["step-00000003.json", "step-00000003.pt"]


def test_a_complete_checkpoint_without_a_sidecar_is_used_with_a_warning(tmp_path):
    folder = tmp_path / "checkpoints"
    write_checkpoint(folder, _state(3))
    write_checkpoint(folder, _state(6)).with_suffix(".json").unlink()  # as an older fastpipe killed after its rename
    logged = []
    path, state = load_verified(resolve_candidates("auto", folder), logged.append)
    assert path.name == "step-00000006.pt" and state["position"]["step"] == 6
    assert logged == [f"checkpoint {path} has no sidecar (an older fastpipe's file, or its sidecar was removed): it "
                      "loads, so it is used without its SHA-256 check"]


def test_best_pt_and_last_pt_are_written_off_the_training_thread(tmp_path, monkeypatch):
    """Neither stalls the step. A run stopped by its target writes last.pt just after the best.pt of
    that evaluation, at the same step: last.pt is that host copy again, with no wait for best.pt's
    write and no second snapshot. A later last.pt holds the weights as they are then."""
    from fastpipe.checkpoint import background
    from fastpipe.checkpoint.policy import Checkpointer
    from fastpipe.train import graph

    settings = make_settings(TINY)
    g = graph.build(settings, cpu_runtime())
    slow, order = background.write_checkpoint, []

    def slow_write(folder, state, name=None):  # a slow disk: 0.3 s per file
        time.sleep(0.3)
        order.append(name)
        return slow(folder, state, name=name)

    monkeypatch.setattr(background, "write_checkpoint", slow_write)
    ckpt = Checkpointer(settings.train, tmp_path)
    begun = time.perf_counter()
    best = ckpt.save_weights(g, "best", 4, metric={"accuracy": 0.5})
    last = ckpt.save_weights(g, "last", 4, metric={"accuracy": 0.5})
    stalled = time.perf_counter() - begun
    assert stalled < 0.25 and not best.exists() and not last.exists()  # the training thread went on
    ckpt.settle()
    assert order == ["best", "last"]  # one write at a time, in order
    assert verify(best) is None and verify(last) is None
    kept, same = (torch.load(path, weights_only=True) for path in (best, last))
    assert (kept["which"], same["which"], kept["step"], same["step"]) == ("best", "last", 4, 4)
    name = next(name for name, _ in g.model.named_parameters())
    assert torch.equal(same["model"][name], kept["model"][name])

    with torch.no_grad():  # training goes on: a later last.pt has the new weights, best.pt the old
        for p in g.model.parameters():
            p.add_(1.0)
    ckpt.save_weights(g, "last", 6, metric={"accuracy": 0.25})
    ckpt.settle()
    moved = torch.load(last, weights_only=True)
    assert moved["step"] == 6 and torch.equal(moved["model"][name], kept["model"][name] + 1.0)
    assert torch.equal(torch.load(best, weights_only=True)["model"][name], kept["model"][name])
    ckpt.save_weights(g, "best", 8, metric={"accuracy": 0.5})
    ckpt.save_weights(g, "last", 8, metric={"accuracy": 0.5})  # reused: last.pt reads the shared buffers
    with torch.no_grad():  # a new best at once: its snapshot must wait for last.pt's write to end first
        for p in g.model.parameters():
            p.add_(2.0)
    ckpt.save_weights(g, "best", 10, metric={"accuracy": 0.75})
    ckpt.settle()
    assert torch.equal(torch.load(last, weights_only=True)["model"][name], moved["model"][name])
    assert torch.equal(torch.load(best, weights_only=True)["model"][name], moved["model"][name] + 2.0)
    assert ckpt.latest is None  # a weights file is never the checkpoint a resume starts from
