"""The generated sgemm.v1 modules (sgemm_pb2, sgemm_pb2_grpc), never committed.

Found, in order:
  1. in $SGEMM_PY_STUBS (the build makes them: build/python-stubs, target
     sgemm_python_stubs; the tests point here);
  2. already importable as sgemm.v1 (installed by other means);
  3. generated now from the repository's proto/ (or $SGEMM_PROTO_DIR) with
     protoc and grpc_python_plugin (Debian: protobuf-compiler,
     protobuf-compiler-grpc) into a cache directory keyed by the proto's hash
     ($XDG_CACHE_HOME or ~/.cache, sgemm-client/).
"""

import hashlib
import importlib
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

_PROTO = "sgemm/v1/sgemm.proto"


def _import():
    pb2 = importlib.import_module("sgemm.v1.sgemm_pb2")
    pb2_grpc = importlib.import_module("sgemm.v1.sgemm_pb2_grpc")
    return pb2, pb2_grpc


def _proto_dir():
    env = os.environ.get("SGEMM_PROTO_DIR")
    if env:
        return pathlib.Path(env)
    # clients/python/sgemm_client/_stubs.py -> the repository's proto/
    return pathlib.Path(__file__).resolve().parents[3] / "proto"


def generate(out_dir, proto_dir=None):
    """Runs protoc for sgemm.v1 into out_dir (creating out_dir/sgemm/v1/*.py)."""
    proto_dir = pathlib.Path(proto_dir or _proto_dir())
    protoc = shutil.which("protoc")
    plugin = shutil.which("grpc_python_plugin")
    if not protoc or not plugin:
        raise ImportError("sgemm_client: the sgemm.v1 Python stubs are missing and protoc or grpc_python_plugin "
                          "is not installed (apt-get install protobuf-compiler protobuf-compiler-grpc, or set "
                          "SGEMM_PY_STUBS to a directory made by the build target sgemm_python_stubs)")
    subprocess.run([protoc, f"-I{proto_dir}", f"--python_out={out_dir}", f"--grpc_out={out_dir}",
                    f"--plugin=protoc-gen-grpc={plugin}", str(proto_dir / _PROTO)], check=True)


def load():
    env = os.environ.get("SGEMM_PY_STUBS")
    if env and env not in sys.path:
        sys.path.insert(0, env)
    try:
        return _import()
    except ImportError:
        if env:
            raise
    proto = _proto_dir() / _PROTO
    if not proto.is_file():
        raise ImportError(f"sgemm_client: no sgemm.v1 stubs importable and no {proto} to generate them from "
                          "(set SGEMM_PY_STUBS or SGEMM_PROTO_DIR)")
    digest = hashlib.sha256(proto.read_bytes()).hexdigest()[:16]
    cache = pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache"))
    out = cache / "sgemm-client" / f"stubs-{digest}"
    if not (out / "sgemm" / "v1" / "sgemm_pb2_grpc.py").is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = pathlib.Path(tempfile.mkdtemp(dir=out.parent))
        generate(tmp)
        try:
            tmp.rename(out)  # whole or not at all, even with several processes at once
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    sys.path.insert(0, str(out))
    return _import()
