"""Runs a command as one rank of a job and records what it cost that rank: the command's
stderr in OUT/rank-RANK.log and its peak resident set size (ru_maxrss, of the command and
its children) in OUT/rank-RANK.rss. Used by scripts/bench-shard.sh under torchrun.

    python peak_rss.py OUT COMMAND [ARG...]
"""

import os
import resource
import signal
import subprocess
import sys


def main() -> int:
    out, command = sys.argv[1], sys.argv[2:]
    rank = os.environ.get("RANK", "0")
    with open(os.path.join(out, f"rank-{rank}.log"), "wb") as log:
        child = subprocess.Popen(command, stderr=log)
        # A stop asked of this wrapper is the rank's: passed on, then waited for.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda s, _f: child.send_signal(s))
        status = child.wait()
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    path = os.path.join(out, f"rank-{rank}.rss")
    with open(path + ".tmp", "w") as f:
        f.write(f"{peak_kib * 1024}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)
    return status


if __name__ == "__main__":
    sys.exit(main())
