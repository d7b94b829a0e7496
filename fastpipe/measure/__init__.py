"""Measurement: step timing, data-wait, memory, GPU utilisation, FLOPs and MFU, hardware ceilings. Returns numbers, prints nothing."""
