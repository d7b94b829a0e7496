"""What a JPEG pack keeps of the raw pack: bytes per image and pixel error per quality and chroma.

Takes the first --images files of a JPEG folder, resizes each as the pack does (decode_rgb, then
torchvision's antialiased Resize to --size), encodes it with Pillow at each quality with 4:2:0 and
4:4:4 chroma, decodes it with torchvision (libjpeg-turbo, one CPU thread) and compares with the
resized pixels: mean and largest absolute error in 0..255 units, bytes per image, encode and decode
milliseconds per image. Prints a markdown table (and writes it to --out when given).

    python benchmarks/jpeg_fidelity.py FOLDER --images 256 --size 256 --out DEST/jpeg-fidelity.md
"""
from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", type=Path)
    p.add_argument("--images", type=int, default=256)
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--qualities", default="75,85,90,95")
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    sys.path.insert(0, str(REPO))
    import numpy as np
    import torch
    from PIL import Image
    from torchvision import transforms
    from torchvision.io import decode_jpeg

    from fastpipe.data.images import decode_rgb

    torch.set_num_threads(1)
    files = sorted(a.folder.rglob("*.jpg"))[:a.images]
    resize = transforms.Resize((a.size, a.size), antialias=True)
    pixels = [np.asarray(resize(decode_rgb(str(f)))) for f in files]
    raw = pixels[0].nbytes
    lines = [f"JPEG at the stored size {a.size}x{a.size}: {len(files)} images of {a.folder.name}, raw {raw:,} bytes/image; "
             f"{time.strftime('%Y-%m-%d')}, torch {torch.__version__}", "",
             "| quality | chroma | bytes/image | of raw | mean abs error | max abs error | encode ms | decode ms |",
             "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for q in (int(x) for x in a.qualities.split(",")):
        for name, sub in (("4:2:0", 2), ("4:4:4", 0)):
            t0, files_q = time.perf_counter(), []
            for px in pixels:
                buf = io.BytesIO()
                Image.fromarray(px, "RGB").save(buf, format="JPEG", quality=q, subsampling=sub)
                files_q.append(buf.getvalue())
            t1 = time.perf_counter()
            decoded = [decode_jpeg(torch.frombuffer(bytearray(f), dtype=torch.uint8)).permute(1, 2, 0).numpy()
                       for f in files_q]
            t2 = time.perf_counter()
            err = [np.abs(px.astype(np.int16) - d.astype(np.int16)) for px, d in zip(pixels, decoded)]
            size = float(np.mean([len(f) for f in files_q]))
            lines.append(f"| {q} | {name} | {size:,.0f} | {size / raw:.3f} | {np.mean([e.mean() for e in err]):.2f} | "
                         f"{max(int(e.max()) for e in err)} | {1e3 * (t1 - t0) / len(pixels):.2f} | "
                         f"{1e3 * (t2 - t1) / len(pixels):.2f} |")
    text = "\n".join(lines) + "\n"
    if a.out:
        a.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
