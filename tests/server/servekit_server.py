# SPDX-License-Identifier: Apache-2.0
"""Starts `servekit serve` on a free loopback port and stops it: shared by the server's tests,
its load benchmark and example 07."""
import os
import pathlib
import re
import signal
import subprocess
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"


def servekit_bin():
    b = os.environ.get("SERVEKIT_BIN") or str(ROOT / "build" / "apps" / "servekit")
    if not os.path.exists(b):
        raise RuntimeError(f"no servekit binary at {b}: build it (scripts/build.sh) or set SERVEKIT_BIN")
    return b


def tiny_args():
    """The tiny fixture model, its 512-token vocabulary and its three LoRA adapters."""
    return ["--model", str(FIXTURES / "tiny-a"), "--vocab", str(FIXTURES / "tiny-vocab"),
            "--adapter", str(FIXTURES / "tiny-a" / "lora")]


class Server:
    """binary: the servekit program (default servekit_bin()); env: its environment; start_s: how
    long it may take to listen."""

    def __init__(self, args, log=None, port=0, binary=None, env=None, start_s=60):
        self.log_path = log
        self.log = open(log, "w") if log else subprocess.DEVNULL
        self.proc = subprocess.Popen([binary or servekit_bin(), "serve", "--port", str(port),
                                      *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, env=env)
        self.lines = []
        deadline = time.time() + start_s
        while True:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError("servekit serve exited before listening:\n" + "".join(self.lines))
            self.lines.append(line)
            m = re.search(r"listening on (http://[0-9.]+:(\d+))", line)
            if m:
                self.url, self.port = m.group(1), int(m.group(2))
                break
            if time.time() > deadline:
                raise RuntimeError(f"servekit serve did not start in {start_s} s")
        # Keep draining stderr (one line per request) so the server never blocks on it.
        import threading
        self._t = threading.Thread(target=self._drain, daemon=True)
        self._t.start()

    def _drain(self):
        for line in self.proc.stderr:
            self.lines.append(line)
            if self.log_path:
                self.log.write(line)

    def rss_kib(self):
        for line in open(f"/proc/{self.proc.pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout=timeout)
        self._t.join(timeout=5)
        return code

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.stop()
