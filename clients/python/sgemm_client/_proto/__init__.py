"""The generated modules of sgemm.v1 and grpc.health.v1 (sgemm_pb2, sgemm_pb2_grpc,
health_pb2, health_pb2_grpc), never committed.

An installed package has them here: setup.py generates them at build time. A
checkout that was never built generates them on first import into a cache
directory (sgemm_client/_protogen.py), which is added to this package's path.
"""

import pathlib

if not (pathlib.Path(__file__).parent / "health_pb2_grpc.py").is_file():
    from .. import _protogen

    __path__.append(str(_protogen.cached()))  # noqa: F821  (a package's __path__)
