"""Builds sgemm-client: setuptools with one step added, the gRPC modules of
sgemm.v1 and grpc.health.v1 generated from the repository's proto/ (or
$SGEMM_PROTO_DIR) into the built package (sgemm_client/_proto), so an
installed package needs neither protoc nor the checkout. Metadata: pyproject.toml.

    pip install --no-build-isolation clients/python     # Debian: python3-grpcio, python3-numpy
"""

import importlib.util
import pathlib

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent


def _protogen():
    # By path: the package itself is not importable before it is built.
    spec = importlib.util.spec_from_file_location("_sgemm_protogen", HERE / "sgemm_client" / "_protogen.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildWithStubs(build_py):
    def run(self):
        super().run()
        gen = _protogen()
        gen.generate(pathlib.Path(self.build_lib) / "sgemm_client" / "_proto", gen.find_proto_dir(HERE))


setup(cmdclass={"build_py": BuildWithStubs})
