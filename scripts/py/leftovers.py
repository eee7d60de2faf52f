"""The processes a test command left behind: every process whose environment carries
the mark the test command exported (DRMAS_TEST_SESSION=<id>), other than this checker
and the processes it runs under. A process that outlives its test (an orphaned server,
a worker of one) inherits the mark, so none escapes by being reparented.

    python3 scripts/py/leftovers.py <id> [--kill]

Prints one line per leftover (pid, parent, command line) and exits 1 if there is any;
with --kill they are killed (SIGKILL) after being listed. Standard library only: it
also runs when the set-up failed before the venv existed.
"""

import os
import signal
import sys

MARK = "DRMAS_TEST_SESSION"


def ancestors(pid):
    """This process and its parents up to init."""
    seen = set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        pid = parent_of(pid)
    return seen


def parent_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return 0
    # Fields after the command's closing parenthesis: state, ppid, …
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[1]) if fields[0] != "Z" else 0


def marked(pid, session):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
    except OSError:
        return False
    return f"{MARK}={session}".encode() in env


def command_line(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def main():
    if len(sys.argv) < 2 or not sys.argv[1]:
        print("usage: leftovers.py SESSION [--kill]", file=sys.stderr)
        return 2
    session = sys.argv[1]
    kill = "--kill" in sys.argv[2:]
    mine = ancestors(os.getpid())
    left = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid in mine or parent_of(pid) == 0:
            continue
        if marked(pid, session):
            left.append(pid)
    for pid in left:
        print(f"left running: pid {pid} (parent {parent_of(pid)}): {command_line(pid)}")
    if kill:
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
