"""Runs clients/python/examples/multiply.py against a fresh sgemm-server and
checks that it reports a small error (the example stays runnable)."""

import re
import subprocess
import sys

from server_process import ServerProcess

server = ServerProcess()
try:
    run = subprocess.run([sys.executable, sys.argv[1], "--server", server.address, "--m", "301", "--n", "77",
                          "--k", "129"], capture_output=True, text=True, timeout=120)
finally:
    code = server.stop()
print(run.stdout, run.stderr, sep="")
match = re.search(r"max \|C - reference\| = (\S+)", run.stdout)
if run.returncode != 0 or code != 0 or not match or float(match.group(1)) > 1e-3:
    sys.exit(f"example failed: exit {run.returncode}, server exit {code}")
