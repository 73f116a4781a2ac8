"""Running a ``turnout`` command in the foreground, as a user does, from a test: its output read
line by line on a thread (so a test can wait for a line with a deadline), and Ctrl-C to stop it."""

from __future__ import annotations

import queue
import signal
import subprocess
import threading
import time


def read_lines(proc: subprocess.Popen[bytes]) -> queue.Queue[bytes]:
    """The CLI's output, line by line, read on a thread so that the test can wait with a deadline."""
    lines: queue.Queue[bytes] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(b"")  # end of output

    threading.Thread(target=pump, daemon=True).start()
    return lines


def wait_for_line(lines: queue.Queue[bytes], needle: bytes | None, seen: list[bytes], timeout: float) -> bool:
    """Collect lines into ``seen`` until one holds ``needle`` (None: until the output ends)."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            return False
        if not line:
            return needle is None
        seen.append(line)
        if needle is not None and needle in line:
            return True
    return False


def stop_like_a_user(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:  # stop it the way a user would
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
