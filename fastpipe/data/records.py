"""Records packs (pack format version 2): any dataset of fixed-shape samples, for ``data=mmap``.

A sample ``(input, target)`` (tensors, numbers, or tuples / dicts of them) is flattened into named
fields; each record stores its fields' bytes at fixed offsets, so one ``np.take`` over the memory
map gathers a whole batch, and the fields are cut out of it as (B, *shape) tensors. Numbers become
0-d tensors of the dtype torch's ``default_collate`` would give them (int64 / float64 / bool), so a
batch is the same as data=default's.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, List, Tuple

import numpy as np
import torch

from fastpipe.data.packfile import DEFAULT_CHUNK_IMAGES, TRAIN, VAL, PackReader, PackWriter
from fastpipe.errors import DataError


def _leaf(value: Any, where: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, bool):
        return torch.tensor(value)
    if isinstance(value, (int, float, np.number)):
        return torch.tensor(value, dtype=torch.int64 if isinstance(value, (int, np.integer)) else torch.float64)
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    raise DataError(f"data=mmap packs tensors and numbers, but {where} is a {type(value).__name__}; "
                    "use data=default for this dataset")


def flatten(value: Any, path: str = "sample") -> Tuple[Any, List[Tuple[str, torch.Tensor]]]:
    """(structure, [(field name, tensor)]): the structure says how the fields rebuild ``value``."""
    if isinstance(value, (tuple, list)):
        parts = [flatten(v, f"{path}.{i}") for i, v in enumerate(value)]
        return {"tuple": [p[0] for p in parts]}, [leaf for p in parts for leaf in p[1]]
    if isinstance(value, dict):
        parts = {k: flatten(v, f"{path}.{k}") for k, v in value.items()}
        return {"dict": {k: p[0] for k, p in parts.items()}}, [leaf for p in parts.values() for leaf in p[1]]
    return {"field": path}, [(path, _leaf(value, path))]


def unflatten(structure: Any, fields: dict) -> Any:
    if "tuple" in structure:
        return tuple(unflatten(s, fields) for s in structure["tuple"])
    if "dict" in structure:
        return {k: unflatten(s, fields) for k, s in structure["dict"].items()}
    return fields[structure["field"]]


def layout_of(sample: Any) -> Tuple[Any, list, int]:
    """(structure, fields [{name, dtype, shape, offset}], bytes per record) of one sample."""
    structure, leaves = flatten(sample)
    fields, offset = [], 0
    for name, tensor in leaves:
        array = tensor.numpy()
        fields.append({"name": name, "dtype": array.dtype.str, "shape": list(array.shape), "offset": offset})
        offset += array.nbytes
    return structure, fields, max(1, offset)


def _record(sample: Any, fields: list, record_bytes: int, index: int) -> np.ndarray:
    _, leaves = flatten(sample)
    out = np.zeros(record_bytes, dtype=np.uint8)
    if [n for n, _ in leaves] != [f["name"] for f in fields]:
        raise DataError(f"data=mmap needs every sample to have the same structure; sample {index} differs "
                        "from sample 0; use data=default for this dataset")
    for (name, tensor), f in zip(leaves, fields):
        array = np.ascontiguousarray(tensor.numpy())
        if list(array.shape) != f["shape"] or array.dtype.str != f["dtype"]:
            raise DataError(f"data=mmap needs fixed-shape samples, but sample {index}'s {name} is {array.dtype} "
                            f"{list(array.shape)}, sample 0's {np.dtype(f['dtype'])} {f['shape']}; use data=default "
                            "for variable shapes")
        out[f["offset"]:f["offset"] + array.nbytes] = array.reshape(-1).view(np.uint8)
    return out


def pack_records(train, val, out: Path, meta: dict, progress: bool = False,
                 chunk_records: int = DEFAULT_CHUNK_IMAGES) -> Path:
    """Write every sample of ``train`` then ``val`` (map-style datasets) into a records pack at ``out``."""
    structure, fields, record_bytes = layout_of(train[0])
    counts = (len(train), len(val) if val is not None else 0)
    split = [TRAIN] * counts[0] + [VAL] * counts[1]
    meta = {**meta, "fields": fields, "structure": structure, "train": counts[0], "val": counts[1]}
    samples = ((ds, i) for ds in (train, val) if ds is not None for i in range(len(ds)))
    if progress:
        from tqdm import tqdm
        samples = tqdm(samples, total=sum(counts), desc=f"packing {Path(out).name}", unit="sample", disable=None)
    with PackWriter(out, 1, record_bytes, [], [0] * len(split), split, meta, chunk_records,
                    record_bytes=record_bytes) as writer:
        for n, (ds, i) in enumerate(samples):
            writer.write(_record(ds[i], fields, record_bytes, n))
    return Path(out)


class RecordPack:
    """A records pack opened for reading: ``read_batch(indices)`` -> (inputs, targets) on the host."""

    def __init__(self, reader: PackReader) -> None:
        if reader.is_images:
            raise DataError(f"pack {reader.path} holds images, not records")
        self.reader, self.path = reader, reader.path
        self.structure = reader.meta["structure"]
        self.fields = reader.meta["fields"]
        self.record_bytes = reader.width

    def indices(self, split: int) -> np.ndarray:
        return self.reader.indices(split)

    def read_batch(self, indices, pin: bool = False):
        rows = np.take(self.reader.images.reshape(self.reader.count, self.record_bytes), np.asarray(indices), axis=0)
        fields = {}
        for f in self.fields:
            dtype = np.dtype(f["dtype"])
            count = int(np.prod(f["shape"], dtype=np.int64))
            raw = np.ascontiguousarray(rows[:, f["offset"]:f["offset"] + count * dtype.itemsize])
            tensor = torch.from_numpy(raw.view(dtype).reshape((len(rows), *f["shape"])))
            fields[f["name"]] = tensor.pin_memory() if pin else tensor
        return unflatten(self.structure, fields)

    def describe(self) -> str:
        return self.reader.describe()
