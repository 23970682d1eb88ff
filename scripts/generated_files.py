"""Shared by scripts/generate_kernels.py and scripts/generate_bwd_kernels.py: brings the files of one
prefix in csrc/generated/ in line with what a generator wants (writes changed ones, removes ones it
no longer lists), or with --check only reports what is out of date."""
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "csrc", "generated")


def sync(prefix, want, argv=None):
    """want: {file name: text}; every name starts with prefix. Returns the process exit code."""
    argv = sys.argv[1:] if argv is None else argv
    os.makedirs(ROOT, exist_ok=True)
    check = "--check" in argv
    stale = []
    for name in sorted(os.listdir(ROOT)):
        if name.startswith(prefix) and name.endswith(".cu") and name not in want:
            stale.append(name)
            if not check:
                os.remove(os.path.join(ROOT, name))
    for name, text in want.items():
        path = os.path.join(ROOT, name)
        old = open(path).read() if os.path.exists(path) else None
        if old != text:
            stale.append(name)
            if not check:
                with open(path, "w") as f:
                    f.write(text)
    if check and stale:
        print("out of date: " + ", ".join(stale))
        return 1
    print(("up to date" if check else "wrote") + f": {len(want)} {prefix}* files in csrc/generated")
    return 0
