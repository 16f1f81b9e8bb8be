"""Runs every example in clients/python/examples against fresh sgemm-servers
(TCP and Unix socket; TLS with a token for tls_token.py) and checks each one
exits 0 and reports a small error, so the examples stay runnable.

    run_examples.py EXAMPLES_DIR
"""

import json
import pathlib
import re
import subprocess
import sys
import tempfile

from server_process import ServerProcess

examples = pathlib.Path(sys.argv[1])
tmp = pathlib.Path(tempfile.mkdtemp(prefix="sgemm-py-examples-"))


def make_pki(d):
    """A CA and a server certificate for 127.0.0.1, with the openssl CLI."""
    d.mkdir(exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run = lambda *a: subprocess.run(a, cwd=d, check=True, capture_output=True)  # noqa: E731
    run("openssl", "req", "-x509", *ec, "-days", "2", "-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=ca")
    run("openssl", "req", *ec, "-keyout", "s.key", "-out", "s.csr", "-subj", "/CN=s")
    (d / "ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("openssl", "x509", "-req", "-in", "s.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "2", "-out", "s.pem", "-extfile", "ext")


server = ServerProcess("--cpu-threads", "1", unix=True)
make_pki(tmp / "pki")
(tmp / "tokens.json").write_text(json.dumps({"clients": [{"name": "example", "token": "example-token-0123456789"}]}))
secure = ServerProcess("--tls-cert", str(tmp / "pki" / "s.pem"), "--tls-key", str(tmp / "pki" / "s.key"),
                       "--auth-tokens", str(tmp / "tokens.json"), "--cpu-threads", "1")
runs = {
    "multiply.py": ["--server", server.address, "--m", "301", "--n", "77", "--k", "129"],
    "resident.py": ["--server", server.address, "--size", "129"],
    "shared_memory.py": ["--server", server.unix_target, "--m", "211", "--n", "67", "--k", "143"],
    "asyncio_multiply.py": ["--server", server.address, "--count", "3", "--size", "101"],
    "connections.py": ["--server", server.address, "--size", "1100", "--connections", "4", "--workers", "processes"],
    "observe.py": ["--server", server.address, "--trace-file", str(tmp / "trace.json")],
    "tls_token.py": ["--server", secure.address, "--tls-ca", str(tmp / "pki" / "ca.pem"), "--token",
                     "example-token-0123456789"],
    # Against a cpu server it can only say it needs a GPU (and exit 0); tests/clients/python/test_cuda_ipc.py
    # covers device arrays on the GPU machine.
    "device_arrays.py": ["--server", server.unix_target, "--m", "129", "--n", "65", "--k", "97"],
}
may_skip = {"device_arrays.py"}  # exits 0 saying "skipped:" where the host has no GPU for it
failed = []
try:
    missing = {p.name for p in examples.glob("*.py")} - set(runs)
    if missing:
        failed.append(f"examples this runner does not run: {sorted(missing)}")
    for name, args in runs.items():
        run = subprocess.run([sys.executable, str(examples / name), *args], capture_output=True, text=True,
                             timeout=120, cwd=tmp)
        print(f"== {name}\n{run.stdout}{run.stderr}")
        match = re.search(r"max \|C - reference\| = (\S+)", run.stdout)
        if name in may_skip and run.returncode == 0 and run.stdout.startswith("skipped:"):
            continue
        if run.returncode != 0 or not match or float(match.group(1)) > 1e-2:
            failed.append(f"{name}: exit {run.returncode}, {match.group(0) if match else 'no error reported'}")
finally:
    codes = (server.stop(), secure.stop())
if failed or codes != (0, 0):
    sys.exit(f"examples failed: {failed}; servers exited {codes}")
