"""The real sgemm-server on 127.0.0.1 with an ephemeral port (and, on request,
a Unix socket), for the Python end-to-end tests (the Python twin of
tests/e2e/server_process.h).

$SGEMM_SERVER_BIN names the binary (CTest sets it); the backend is
$SGEMM_E2E_BACKEND or cpu.
"""

import os
import pathlib
import signal
import subprocess
import tempfile
import time


class ServerProcess:
    """unix=True: the server also listens on a Unix socket (shared-memory regions), `unix_target`."""

    def __init__(self, *extra, start_timeout_s=60, unix=False):
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="sgemm-py-e2e-"))
        port_file = self.dir / "port"
        self.socket = self.dir / "sgemm.sock" if unix else None
        args = [os.environ["SGEMM_SERVER_BIN"], "--listen", "127.0.0.1:0", "--port-file", str(port_file),
                "--backend", os.environ.get("SGEMM_E2E_BACKEND", "cpu"), "--log-dir", str(self.dir / "logs"),
                *(["--listen", f"unix:{self.socket}"] if unix else []), *extra]
        self._log = open(self.dir / "stdout.log", "wb")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT)
        give_up = time.monotonic() + start_timeout_s
        self.port = None
        while time.monotonic() < give_up:
            if port_file.is_file():
                text = port_file.read_text().strip()
                if text:
                    self.port = int(text)
                    break
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        if self.port is None:
            self.stop()
            raise RuntimeError(f"sgemm-server did not start: {' '.join(args)}\n{self.log()}")

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    @property
    def unix_target(self):
        return f"unix:{self.socket}"

    def log(self):
        return (self.dir / "stdout.log").read_text(errors="replace")

    def request_log_line(self, request_id, timeout_s=30):
        """The server's log line for a finished request (it is written as the request ends, so it may follow
        the client's return by a moment: polled with a deadline)."""
        give_up = time.monotonic() + timeout_s
        needle = f"request id={request_id} "
        while True:
            for path in [self.dir / "stdout.log", *sorted((self.dir / "logs").glob("*.log"))]:
                if path.is_file():
                    for line in path.read_text(errors="replace").splitlines():
                        if needle in line:
                            return line
            if time.monotonic() > give_up:
                raise AssertionError(f"no log line for request {request_id}:\n{self.log()}")
            time.sleep(0.02)

    def stop(self, timeout_s=30):
        """SIGTERM, then waits; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode
