"""Images packs as batch sources for data=mmap: one gather per shard run, then JPEG decoding if any
(or the JPEG files themselves, for a decoder downstream)."""
from __future__ import annotations

from typing import List, Optional

import numpy as np
import torch

from fastpipe.data.pack.jpeg import Decoder, gather
from fastpipe.data.pack.shards import PackSet
from fastpipe.errors import DataError


def pack_files(packs: PackSet, idx: np.ndarray) -> List[torch.Tensor]:
    """The JPEG files of pack images ``idx`` (sorted positions), one tensor view each, in order."""
    return [f for reader, local, _ in packs.runs(idx) for f in gather(reader, local)]


def undecodable(path, idx: np.ndarray, exc: Exception) -> DataError:
    """The one line for a JPEG among pack images ``idx`` that the codec refused with ``exc``."""
    return DataError(f"pack {path}: a JPEG among images {idx[0]}..{idx[-1]} does not decode "
                     f"({(str(exc).strip().splitlines() or [''])[-1][:200]}); check the pack with "
                     "data.verify=true, or repack it")


class PackImages:
    """The images of a PackSet: ``read_batch(sorted positions)`` -> (uint8 N x C x H x W, int64 labels).

    Raw: one ``np.take`` per shard run straight into (pinned) memory; numpy drops the GIL. JPEG: the
    files are gathered the same way, then decoded by ``decoder`` (GPU or CPU threads)."""

    def __init__(self, packs: PackSet, decoder: Optional[Decoder] = None) -> None:
        self.packs, self.decoder, self.path = packs, decoder, packs.path

    @property
    def reader(self):
        """The PackReader of a one-file pack."""
        return self.packs.reader(0)

    def read_batch(self, idx: np.ndarray, pin: bool = False):
        labels = torch.from_numpy(self.packs.labels(idx))
        if self.decoder is None:
            h, w = self.packs.stored
            images = torch.empty((len(idx), h, w, 3), dtype=torch.uint8, pin_memory=pin)
            out = images.numpy()
            for reader, local, where in self.packs.runs(idx):
                np.take(reader.images, local, axis=0, out=out[where], mode="clip")  # clip: unbuffered
            images = images.permute(0, 3, 1, 2)
        else:
            files = pack_files(self.packs, idx)
            try:
                images = self.decoder(files)
            except torch.OutOfMemoryError:
                raise
            except RuntimeError as exc:  # a JPEG that does not decode: name the pack, not the codec's line
                raise undecodable(self.path, idx, exc) from exc
        return images, labels.pin_memory() if pin else labels


class PackFiles:
    """The JPEG files of a JPEG pack, undecoded, for a decoder that takes whole batches of files
    (data.decoder=dali): ``read_batch(sorted positions)`` -> (one uint8 array per file, int64 labels)."""

    def __init__(self, packs: PackSet) -> None:
        self.packs, self.path = packs, packs.path

    def read_batch(self, idx: np.ndarray, pin: bool = False):
        """``pin`` is not used: the decoder copies the files into memory of its own."""
        files = [f.numpy() for f in pack_files(self.packs, idx)]
        return files, self.packs.labels(idx)
