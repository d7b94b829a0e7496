"""Building packs for real: a `python -m fastpipe.pack` killed mid-build resumes, two builders of
one pack, and a training run from a JPEG cache."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import REPO, run_in_process

from fastpipe.cli.pack import main as pack_main
from fastpipe.data import shapes
from fastpipe.data.pack.journal import build_lock, journal_path, partial_path
from fastpipe.data.pack.reader import PackReader

pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities:DeprecationWarning")


def repeated_folder(root, copies=12):
    """An ImageFolder of 384 entries: 32 generated 500x375 JPEGs, each linked ``copies`` times (slow
    enough to decode that a one-process pack is still running when the test kills it)."""
    src = shapes.generate(root / "src", 2, 32, (500, 375), seed=3)
    for cls in ("circle", "square"):
        (root / "images" / cls).mkdir(parents=True)
        for f in sorted((src / cls).glob("*.jpg")):
            for k in range(copies):
                os.symlink(f, root / "images" / cls / f"{f.stem}-{k}.jpg")
    return root / "images"


def pack_cmd(folder, out):
    return [sys.executable, "-m", "fastpipe.pack", str(folder), str(out), "--size", "128", "--codec", "jpeg",
            "--chunk-images", "16", "--threads", "1"]


@pytest.mark.slow
def test_a_killed_pack_is_resumed_by_one_of_two_builders_and_matches_a_fresh_one(tmp_path):
    folder = repeated_folder(tmp_path)
    out, env = tmp_path / "p.fppack", {**os.environ, "PYTHONPATH": str(REPO)}
    first = subprocess.Popen(pack_cmd(folder, out), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and first.poll() is None:
        lines = journal_path(out).read_text().count("\n") if journal_path(out).exists() else 0
        if lines >= 4:  # the head and three groups of 16 images
            break
        time.sleep(0.02)
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert not out.exists() and partial_path(out).exists()
    lines = [json.loads(line.rsplit("\t", 1)[0]) for line in journal_path(out).read_text().splitlines()]
    second = lines[0]["data_offset"] + sum(lines[1]["sizes"])  # where the second group's bytes start
    partial = bytearray(partial_path(out).read_bytes())
    partial[second + 100] ^= 0xFF  # its journal line says one thing, its bytes another: rebuilt from there
    partial_path(out).write_bytes(bytes(partial))
    with open(journal_path(out), "a") as journal:
        journal.write('{"g": 9, "crc"')  # a line torn by the kill
    # Both builders start while this test holds the pack's lock, so both must wait for it, however slowly
    # each one starts: the one that takes it next resumes, the other waits again and finds the pack done.
    logs = [tmp_path / f"builder{k}.err" for k in range(2)]
    with build_lock(out, str(out), quiet=True):
        builders = []
        for log in logs:
            with log.open("w") as err:  # the child keeps its own copy of the descriptor
                builders.append(subprocess.Popen(pack_cmd(folder, out), env=env, stdout=subprocess.PIPE,
                                                 stderr=err, text=True))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all("waiting for process" in log.read_text() for log in logs):
            time.sleep(0.05)
        assert all(f"waiting for process {os.getpid()}" in log.read_text() for log in logs)
    results = [b.communicate(timeout=300) for b in builders]
    assert [b.returncode for b in builders] == [0, 0], [log.read_text() for log in logs]
    said = " ".join(o for o, _ in results)
    assert said.count("resumed (") == 1 and said.count("was packed by another process while this one waited") == 1
    assert "resumed (16 of 384 images were already packed)" in said  # the first group; the damaged one on, rebuilt
    assert not partial_path(out).exists() and not journal_path(out).exists()
    fresh = tmp_path / "fresh.fppack"
    assert pack_main([str(folder), str(fresh), "--size", "128", "--codec", "jpeg", "--chunk-images", "16",
                      "--threads", "2", "--no-progress"]) == 0
    assert out.read_bytes() == fresh.read_bytes()  # the resumed pack is the pack, byte for byte
    PackReader(out).verify()


def test_training_from_a_jpeg_cache_decodes_on_the_cpu(tmp_path, tiny):
    m = run_in_process(tmp_path, [o for o in tiny if not o.startswith("data.")] +
                       ["data=mmap", "data.codec=jpeg", "data.pack_threads=2"])
    graph = (tmp_path / "graph.txt").read_text()
    assert m["status"] == "ok" and "codec=jpeg  decoder=cpu" in graph and "(cache, packed now)" in graph
