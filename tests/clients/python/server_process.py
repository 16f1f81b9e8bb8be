"""The real sgemm-server on 127.0.0.1 with an ephemeral port, for the Python
end-to-end tests (the Python twin of tests/e2e/server_process.h).

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
    def __init__(self, *extra, start_timeout_s=60):
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="sgemm-py-e2e-"))
        port_file = self.dir / "port"
        args = [os.environ["SGEMM_SERVER_BIN"], "--listen", "127.0.0.1:0", "--port-file", str(port_file),
                "--backend", os.environ.get("SGEMM_E2E_BACKEND", "cpu"), "--log-dir", str(self.dir / "logs"),
                *extra]
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

    def log(self):
        return (self.dir / "stdout.log").read_text(errors="replace")

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
