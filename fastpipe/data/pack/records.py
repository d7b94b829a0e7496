"""Records packs (pack format version 2): any dataset of fixed-shape samples, for ``data=mmap``.

A sample ``(input, target)`` (tensors, numbers, or tuples / dicts of them) is flattened into
numbered fields; each record stores its fields' bytes at fixed offsets, so one ``np.take`` over the
memory map gathers a whole batch, and the fields are cut out of it as (B, *shape) tensors. Numbers
become 0-d tensors of the dtype torch's ``default_collate`` would give them (int64 / float64 /
bool; numpy scalars keep theirs), sequences come back as lists and dicts in their order, so a
batch is the same as data=default's.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, List, Tuple

import numpy as np
import torch

from fastpipe.data.pack.format import DEFAULT_CHUNK_IMAGES, TRAIN, VAL
from fastpipe.data.pack.reader import PackReader
from fastpipe.data.pack.writer import PackWriter
from fastpipe.errors import DataError


def _leaf(value: Any, where: str) -> torch.Tensor:
    """A sample's leaf as a tensor of the dtype torch's default_collate would batch it to."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, (np.ndarray, np.number, np.bool_)):
        return torch.from_numpy(np.asarray(value))
    if isinstance(value, bool):
        return torch.tensor(value)
    if isinstance(value, int):
        return torch.tensor(value, dtype=torch.int64)
    if isinstance(value, float):
        return torch.tensor(value, dtype=torch.float64)
    raise DataError(f"data=mmap packs tensors and numbers, but {where} is a {type(value).__name__}; "
                    "use data=default for this dataset")


def flatten(value: Any, path: str = "sample") -> Tuple[Any, List[Tuple[str, torch.Tensor]]]:
    """(structure, [(field name, tensor)]): the structure says how the fields rebuild ``value``.

    Field names are numbered (``f0``, ``f1``, ...) in the order the leaves appear, so no two can
    collide whatever the sample's keys are; ``path`` only words error messages."""
    leaves: List[Tuple[str, torch.Tensor]] = []

    def walk(v: Any, where: str):
        if isinstance(v, (tuple, list)):
            return {"list": [walk(x, f"{where}[{i}]") for i, x in enumerate(v)]}
        if isinstance(v, dict):
            if not all(isinstance(k, (str, int, float, bool)) for k in v):
                raise DataError(f"data=mmap packs dicts with str or number keys, but {where} has a key of another "
                                "type; use data=default for this dataset")
            return {"dict": [[k, type(k).__name__, walk(x, f"{where}[{k!r}]")] for k, x in v.items()]}
        leaves.append((f"f{len(leaves)}", _leaf(v, where)))
        return {"field": leaves[-1][0], "where": where}

    return walk(value, path), leaves


KEY_TYPES = {"str": str, "int": int, "float": float, "bool": lambda k: k == "True" if isinstance(k, str) else bool(k)}


def unflatten(structure: Any, fields: dict) -> Any:
    """The batch structure torch's default_collate would give: sequences as lists, dicts in order."""
    if "list" in structure:
        return [unflatten(s, fields) for s in structure["list"]]
    if "dict" in structure:
        return {KEY_TYPES.get(kind, str)(k): unflatten(s, fields) for k, kind, s in structure["dict"]}
    return fields[structure["field"]]


def _array(tensor: torch.Tensor) -> np.ndarray:
    """The tensor's bytes as a numpy array (bfloat16, which numpy lacks, as its 16-bit pattern)."""
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.view(torch.int16)
    return tensor.contiguous().numpy()


def layout_of(sample: Any) -> Tuple[Any, list, int]:
    """(structure, fields [{name, dtype, shape, offset}], bytes per record) of one sample."""
    structure, leaves = flatten(sample)
    wheres = dict(_wheres(structure))
    fields, offset = [], 0
    for name, tensor in leaves:
        array = _array(tensor)
        dtype = "bfloat16" if tensor.dtype == torch.bfloat16 else array.dtype.str
        fields.append({"name": name, "where": wheres[name], "dtype": dtype, "shape": list(array.shape),
                       "offset": offset})
        offset += array.nbytes
    return structure, fields, max(1, offset)


def _record(sample: Any, structure: Any, fields: list, record_bytes: int, index: int) -> np.ndarray:
    got, leaves = flatten(sample)
    out = np.zeros(record_bytes, dtype=np.uint8)
    if got != structure:
        raise DataError(f"data=mmap needs every sample to have the same structure, but sample {index} of the pack "
                        "(training samples first) differs from the first; use data=default for this dataset")
    for (_, tensor), f in zip(leaves, fields):
        array = _array(tensor)
        dtype = "bfloat16" if tensor.dtype == torch.bfloat16 else array.dtype.str
        if list(array.shape) != f["shape"] or dtype != f["dtype"]:
            raise DataError(f"data=mmap needs fixed-shape samples, but {f['where']} is {_name(dtype)} "
                            f"{list(array.shape)} in sample {index} of the pack and {_name(f['dtype'])} {f['shape']} in "
                            "the first; use data=default for samples whose shapes vary")
        out[f["offset"]:f["offset"] + array.nbytes] = array.reshape(-1).view(np.uint8)
    return out


def _name(dtype: str) -> str:
    return dtype if dtype == "bfloat16" else np.dtype(dtype).name


def _wheres(structure: Any):
    """(field name, where in the sample) of every leaf."""
    if "list" in structure:
        for s in structure["list"]:
            yield from _wheres(s)
    elif "dict" in structure:
        for _, _, s in structure["dict"]:
            yield from _wheres(s)
    else:
        yield structure["field"], structure["where"]


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
            writer.write(_record(ds[i], structure, fields, record_bytes, n))
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
            bf16 = f["dtype"] == "bfloat16"
            dtype = np.dtype("<i2" if bf16 else f["dtype"])
            count = int(np.prod(f["shape"], dtype=np.int64))
            raw = np.ascontiguousarray(rows[:, f["offset"]:f["offset"] + count * dtype.itemsize])
            tensor = torch.from_numpy(raw.view(dtype).reshape((len(rows), *f["shape"])))
            tensor = tensor.view(torch.bfloat16) if bf16 else tensor
            fields[f["name"]] = tensor.pin_memory() if pin else tensor
        return unflatten(self.structure, fields)

    def describe(self) -> str:
        return self.reader.describe()
