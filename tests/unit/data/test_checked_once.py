"""Checks off the critical path, not gone: an image folder's headers and a pack's bytes are checked once
per version of the data (a stamp in the cache), again in full as soon as a file changes."""
from __future__ import annotations

import dataclasses
import os

import pytest
from png_folders import png_folder

from fastpipe.data import images
from fastpipe.errors import DataError


def test_headers_are_checked_once_per_version_of_the_folder(tmp_path, monkeypatch):
    root, cache = png_folder(tmp_path / "pets"), tmp_path / "cache"
    checks = []
    real = images.check_headers
    monkeypatch.setattr(images, "check_headers", lambda files, progress=False: (checks.append(len(files)),
                                                                                 real(files, progress)))
    for _ in range(2):
        images.image_folder(str(root), image_size=16, cache_root=cache)
    assert checks == [20]  # the second run found the stamp
    bad = root / "dogs" / "3.png"
    bad.write_bytes(b"not an image")  # another size and modification time: another version
    with pytest.raises(DataError, match=f"cannot read image {bad}"):
        images.image_folder(str(root), image_size=16, cache_root=cache)
    assert checks == [20, 20]
    with pytest.raises(DataError):  # a failed check leaves no stamp: checked again, and again refused
        images.image_folder(str(root), image_size=16, cache_root=cache)
    bad.unlink()
    images.image_folder(str(root), image_size=16)  # no cache to keep a stamp: checked every time
    images.image_folder(str(root), image_size=16)
    assert checks == [20, 20, 20, 19, 19]


def test_a_pack_is_verified_once_per_version_and_again_when_it_changes(tmp_path, monkeypatch):
    from conftest import cpu_runtime, make_settings, shapes_splits

    from fastpipe.data import build_loader
    from fastpipe.data.pack import resolve as packopen
    from fastpipe.data.pack.reader import PackReader

    splits = shapes_splits(num_images=240, image_size=16)
    settings = make_settings(["data=mmap"])
    runtime = dataclasses.replace(cpu_runtime(), cache_root=tmp_path / "cache")
    verified = []
    real = PackReader.verify
    monkeypatch.setattr(PackReader, "verify", lambda self, *a, **k: (verified.append(self.path), real(self, *a, **k)))

    def describe() -> str:
        packopen._open.cache_clear()  # as a new process would open it
        return build_loader(settings.data, splits, runtime, 16, 0, train=True, channels_last=False).describe()

    assert "(cache, packed now)  verified now" in describe() and len(verified) == 1
    assert "(cache, reused)  verified at " in describe() and len(verified) == 1  # the stamp: not read again
    pack = verified[0]
    os.utime(pack, ns=(pack.stat().st_atime_ns, pack.stat().st_mtime_ns + 10**9))  # the file changed
    assert "(cache, reused)  verified now" in describe() and len(verified) == 2
    data = bytearray(pack.read_bytes())
    data[-1] ^= 0xFF  # a flipped bit in the last image: another version, verified, refused
    pack.write_bytes(bytes(data))
    with pytest.raises(DataError, match="is corrupt: chunk"):
        describe()
