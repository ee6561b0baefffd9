"""The benchmarks' child processes measure their own memory with these two functions,
given to them as source (they run as ``python -c`` scripts): ``status()``, the resident
memory and its peak (``VmRSS``, ``VmHWM`` in bytes), and ``reset_peak()``, which resets the
peak (``/proc/self/clear_refs`` = 5) right before what is measured. Linux only."""

SOURCE = r"""
def status():
    out = {}
    for line in open("/proc/self/status"):
        k, _, v = line.partition(":")
        if k in ("VmRSS", "VmHWM"):
            out[k] = int(v.split()[0]) * 1024
    return out

def reset_peak():
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
"""
