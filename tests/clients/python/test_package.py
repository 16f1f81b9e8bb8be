"""`pip install clients/python` as a user would do it: the package is built
from a copy of the checkout (clients/python and proto/ only) into a fresh
virtual environment that sees the system's grpcio, protobuf and numpy
(Debian: python3-grpcio, python3-numpy), with no index (nothing is
downloaded) and no build isolation (setuptools from the system). Then
`import sgemm_client` from another directory must find the installed package
with its generated gRPC modules inside, its type information and its declared
dependencies, without protoc or the checkout.

The environment is left at VENV for the other Python tests (a CTest fixture).

    test_package.py SOURCE_DIR VENV
"""

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

source, venv = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
tmp = pathlib.Path(tempfile.mkdtemp(prefix="sgemm-py-package-"))
try:
    # A copy: an in-tree build writes build/ and *.egg-info next to the sources.
    shutil.copytree(source / "clients" / "python", tmp / "src" / "clients" / "python",
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*_pb2*.py*"))
    shutil.copytree(source / "proto", tmp / "src" / "proto")
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    # pip from the system's site packages installs into the environment it runs in.
    subprocess.run([python, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--quiet",
                    str(tmp / "src" / "clients" / "python")], check=True)
    shutil.rmtree(tmp / "src")  # nothing of the sources is left to import from
    check = r'''
import importlib.metadata, pathlib, re, sys
import sgemm_client, sgemm_client.aio
from sgemm_client._proto import sgemm_pb2, sgemm_pb2_grpc, health_pb2_grpc
pkg = pathlib.Path(sgemm_client.__file__).parent
assert pkg.is_relative_to(pathlib.Path(sys.prefix)), f"imported from {pkg}, not the environment {sys.prefix}"
assert pathlib.Path(sgemm_pb2.__file__).parent == pkg / "_proto", sgemm_pb2.__file__
for f in ("py.typed", "_proto/sgemm_pb2.pyi", "_proto/health_pb2.pyi"):
    assert (pkg / f).is_file(), f"{f} is not installed"
assert importlib.metadata.version("sgemm-client") == sgemm_client.__version__
requires = {re.match(r"[A-Za-z0-9_.-]+", r).group(0) for r in importlib.metadata.requires("sgemm-client")}
assert {"grpcio", "numpy", "protobuf"} <= requires, requires
assert sgemm_pb2.GemmHeader(stripes=2).stripes == 2
print("sgemm_client", sgemm_client.__version__, "from", pkg)
'''
    env = dict(os.environ, SGEMM_PROTO_DIR=str(tmp / "nowhere"), XDG_CACHE_HOME=str(tmp / "cache"),
               PATH="/nonexistent")  # neither protoc nor the checkout could help now
    env.pop("PYTHONPATH", None)
    subprocess.run([python, "-c", check], check=True, cwd=tmp, env=env)
    assert not (tmp / "cache").exists(), "the installed package generated its modules at import"
finally:
    shutil.rmtree(tmp, ignore_errors=True)
