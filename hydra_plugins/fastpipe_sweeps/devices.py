"""The GPUs a ``gpus`` launcher sweep may hand out, and what NVML says about each (launcher.json)."""

import contextlib
import os
from typing import List, Sequence, Tuple


def visible_gpus() -> Tuple[List[str], bool, str]:
    """The GPUs this sweep may hand out, as ``CUDA_VISIBLE_DEVICES`` entries, whether they are NVML
    (PCI bus) indices, and where the list came from (for messages). The sweep's own
    ``CUDA_VISIBLE_DEVICES`` wins (its entries, which may be indices or UUIDs, are passed on as they
    are); otherwise every GPU NVML sees."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        ids = []
        for entry in (e.strip() for e in env.split(",")):
            if not entry or entry.startswith("-"):  # CUDA stops at the first invalid entry ("-1" hides all)
                break
            ids.append(entry)
        return ids, os.environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID", f"CUDA_VISIBLE_DEVICES={env!r}"
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            count = pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no NVML: a CPU machine
        return [], False, "NVML"
    return [str(i) for i in range(count)], True, "NVML"


def describe_gpus(ids: Sequence[str], pci_order: bool) -> List[dict]:
    """NVML's index, UUID and name of each GPU of a slot, where they can be told (best effort)."""
    if not ids:
        return []
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return []
    out = []
    try:
        for entry in ids:
            try:
                if entry.startswith(("GPU-", "MIG-")):
                    handle = pynvml.nvmlDeviceGetHandleByUUID(entry)
                elif entry.isdigit() and pci_order:
                    handle = pynvml.nvmlDeviceGetHandleByIndex(int(entry))
                else:
                    continue
                name = pynvml.nvmlDeviceGetName(handle)
                uuid = pynvml.nvmlDeviceGetUUID(handle)
                out.append({"cuda_visible_devices": entry, "nvml_index": pynvml.nvmlDeviceGetIndex(handle),
                            "uuid": uuid.decode() if isinstance(uuid, bytes) else uuid,
                            "name": name.decode() if isinstance(name, bytes) else name})
            except Exception:
                continue
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
    return out
