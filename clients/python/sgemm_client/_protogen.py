"""Generates the gRPC modules of sgemm.v1 and grpc.health.v1 for sgemm_client.

setup.py runs this at build time (it loads the file by path, before the
package is importable), so an installed package ships the modules in
sgemm_client/_proto; a checkout that was never built generates them on first
import into a cache directory instead (sgemm_client/_proto/__init__.py).

protoc writes modules that import each other by their proto package
(`from sgemm.v1 import sgemm_pb2`, `from grpc.health.v1 import health_pb2`);
the second would collide with grpcio's own `grpc` package, so the modules are
written flat into one directory and those imports made relative.

Tools, in order: `protoc` with `grpc_python_plugin` on PATH (Debian:
protobuf-compiler, protobuf-compiler-grpc), else the `grpc_tools` module
(pip: grpcio-tools). Debian 12's python3-grpc-tools (1.14) cannot read the
proto's `optional` fields and is not used.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Optional, Sequence

# (proto file under the proto root, its generated modules' stem)
PROTOS = (("sgemm/v1/sgemm.proto", "sgemm"), ("grpc/health/v1/health.proto", "health"))
_IMPORT = re.compile(r"^from (sgemm\.v1|grpc\.health\.v1) import (\w+_pb2)", re.MULTILINE)


def find_proto_dir(start: Optional[pathlib.Path] = None) -> pathlib.Path:
    """The directory holding sgemm/v1/sgemm.proto: $SGEMM_PROTO_DIR, else the checkout's proto/."""
    env = os.environ.get("SGEMM_PROTO_DIR")
    candidates = [pathlib.Path(env)] if env else []
    here = (start or pathlib.Path(__file__)).resolve()
    candidates += [parent / "proto" for parent in here.parents]
    for c in candidates:
        if (c / PROTOS[0][0]).is_file():
            return c
    raise FileNotFoundError("sgemm_client: cannot find proto/sgemm/v1/sgemm.proto (build from the repository "
                            "checkout, or set SGEMM_PROTO_DIR to its proto/ directory)")


def _protoc_command(proto_dir: pathlib.Path, out: pathlib.Path) -> Sequence[str]:
    files = [str(proto_dir / p) for p, _ in PROTOS]
    outs = [f"--python_out={out}", f"--pyi_out={out}", f"--grpc_python_out={out}"]
    protoc, plugin = shutil.which("protoc"), shutil.which("grpc_python_plugin")
    if protoc and plugin:
        outs[-1] = f"--grpc_out={out}"
        return [protoc, f"-I{proto_dir}", *outs, f"--plugin=protoc-gen-grpc={plugin}", *files]
    if importlib.util.find_spec("grpc_tools") is None:  # pip's grpcio-tools bundles protoc and the plugin
        raise RuntimeError("sgemm_client: generating the gRPC modules needs protoc and grpc_python_plugin "
                           "(apt-get install protobuf-compiler protobuf-compiler-grpc) or grpcio-tools")
    return [sys.executable, "-m", "grpc_tools.protoc", f"-I{proto_dir}", *outs, *files]


def generate(out_dir: os.PathLike, proto_dir: Optional[os.PathLike] = None) -> None:
    """Writes sgemm_pb2, sgemm_pb2_grpc, health_pb2, health_pb2_grpc (.py and .pyi) into out_dir."""
    proto_dir = pathlib.Path(proto_dir) if proto_dir else find_proto_dir()
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sgemm-protoc-") as tmp:
        run = subprocess.run(_protoc_command(proto_dir, pathlib.Path(tmp)), capture_output=True, text=True)
        if run.returncode != 0:
            raise RuntimeError(f"sgemm_client: protoc failed ({run.returncode}): {run.stderr.strip()}")
        for proto, stem in PROTOS:
            src_dir = pathlib.Path(tmp) / pathlib.Path(proto).parent
            for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"):
                text = (src_dir / f"{stem}{suffix}").read_text()
                (out_dir / f"{stem}{suffix}").write_text(_IMPORT.sub(r"from . import \2", text))


def proto_digest(proto_dir: pathlib.Path) -> str:
    h = hashlib.sha256()
    for proto, _ in PROTOS:
        h.update((proto_dir / proto).read_bytes())
    return h.hexdigest()[:16]


def cached() -> pathlib.Path:
    """A directory with the generated modules for this checkout's protos, made once per proto content
    under $XDG_CACHE_HOME (or ~/.cache)/sgemm-client/."""
    proto_dir = find_proto_dir()
    cache = pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "sgemm-client"
    out = cache / f"stubs-{proto_digest(proto_dir)}"
    if not (out / "health_pb2_grpc.py").is_file():
        cache.mkdir(parents=True, exist_ok=True)
        tmp = pathlib.Path(tempfile.mkdtemp(dir=cache))
        try:
            generate(tmp, proto_dir)
            tmp.rename(out)  # whole or not at all, even with several processes at once
        except OSError:
            if not (out / "health_pb2_grpc.py").is_file():
                raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


if __name__ == "__main__":
    generate(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
