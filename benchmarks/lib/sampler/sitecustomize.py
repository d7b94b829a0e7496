"""A stack sampler for every Python process of a benchmarked run (benchmarks only, never fastpipe).

With this folder first on PYTHONPATH and FASTPIPE_SAMPLE_DIR set, each Python process that starts
(a run, a sweep and its jobs' processes, a hand loop) samples its threads' stacks every
FASTPIPE_SAMPLE_INTERVAL seconds (default 0.01) from a daemon thread and appends one line per busy
thread to FASTPIPE_SAMPLE_DIR/<pid>.tsv: the time, the thread, the thread's and the process's CPU
seconds, the machine's busy and iowait CPU seconds (/proc/stat), the outermost and innermost import in progress,
the innermost frame of fastpipe's (or the benchmark's) own code, and the innermost frame. A gap
between two samples is time the sampled thread held the interpreter lock in native code.
lib/sampler/timeline.py turns the files into a timeline. Forked children (DataLoader workers) are
not sampled. The sampler stops as the interpreter begins to exit (a daemon thread still reading other
threads' frames during finalisation would abort the process).
"""
import atexit
import os
import sys
import threading
import time

_DIR = os.environ.get("FASTPIPE_SAMPLE_DIR")
IDLE = {"wait", "_wait_for_tstate_lock", "select", "poll", "accept", "recv", "recv_bytes", "_recv", "_recv_bytes",
        "sleep", "get", "readinto", "read", "join", "_worker", "run_forever"}
OWN = ("/fastpipe/", "/benchmarks/", "/hydra_plugins/")


def _machine_cpu() -> tuple:
    """(busy, iowait) CPU seconds of the whole machine since boot."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    idle, iowait = fields[3], fields[4]
    return (sum(fields) - idle - iowait) / tick, iowait / tick


def _thread_cpu(native_id) -> float:
    """CPU seconds of one thread of this process (/proc/self/task/TID/stat: user and system time)."""
    try:
        with open(f"/proc/self/task/{native_id}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError, TypeError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _where(frame) -> tuple:
    """(outermost import, innermost import, innermost own frame, innermost frame) of a stack."""
    inner = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_code.co_name}"
    outer_import = inner_import = own = None
    while frame is not None:
        code = frame.f_code
        if code.co_name == "_find_and_load":
            name = frame.f_locals.get("name")
            inner_import = inner_import or name
            outer_import = name
        elif own is None and any(part in code.co_filename for part in OWN):
            path = code.co_filename
            cut = max(path.rfind(part) for part in OWN)
            own = f"{path[cut + 1:]}:{code.co_name}"
        frame = frame.f_back
    return outer_import, inner_import, own, inner


_STOP = threading.Event()


def _sample(path: str, interval: float) -> None:
    me = threading.get_ident()
    main = threading.main_thread().ident
    with open(path, "a", buffering=1) as out:
        out.write(f"#\t{os.getpid()}\t{os.getppid()}\t{time.time():.6f}\t{' '.join(sys.argv)[:300]}\n")
        while not _STOP.is_set():
            frames = sys._current_frames()
            now, cpu = time.time(), sum(os.times()[:2])
            busy, iowait = _machine_cpu()
            threads = {t.ident: t for t in threading.enumerate()}
            for ident, frame in frames.items():
                if ident == me:
                    continue
                where = _where(frame)
                if ident != main and frame.f_code.co_name in IDLE:
                    continue
                known = threads.get(ident)
                thread = "main" if ident == main else known.name if known else str(ident)
                own_cpu = _thread_cpu(known.native_id) if known else 0.0
                out.write(f"{now:.4f}\t{thread}\t{own_cpu:.2f}\t{cpu:.3f}\t{busy:.2f}\t{iowait:.2f}\t" + "\t".join(
                    str(w) for w in where) + "\n")
            del frames
            _STOP.wait(interval)


def _stop(thread: threading.Thread) -> None:
    _STOP.set()
    thread.join(timeout=1.0)


if _DIR:
    os.makedirs(_DIR, exist_ok=True)
    _thread = threading.Thread(target=_sample, args=(os.path.join(_DIR, f"{os.getpid()}.tsv"),
                                                     float(os.environ.get("FASTPIPE_SAMPLE_INTERVAL", "0.01"))),
                               name="fastpipe-sampler", daemon=True)
    _thread.start()
    atexit.register(_stop, _thread)
