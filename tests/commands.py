"""Waiting on a command that a test runs in its own process."""

import subprocess
import time
from pathlib import Path
from typing import Any, Callable


def wait_until(found: Callable[[], Any], proc: subprocess.Popen, what: str,
               log: Path | None = None, timeout_s: float = 300) -> Any:
    """Polls `found` until it returns something true, while the command runs (output in `log`);
    returns that value. `timeout_s` bounds the test; it is no timing assertion."""
    deadline = time.monotonic() + timeout_s
    while not (value := found()):
        assert proc.poll() is None, (log.read_text()[-3000:] if log else
                                     f"the run ended (exit {proc.returncode}) before {what}")
        assert time.monotonic() < deadline, f"no {what} within {timeout_s} s"
        time.sleep(0.2)
    return value
