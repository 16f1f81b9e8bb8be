"""Channel settings shared by the blocking and the asyncio client: TLS
credentials, the bearer token, and the arguments each channel is made with.

- A `unix:` target keeps its connection however long it idles: shared-memory
  registrations belong to the connection they were made on, and an idle
  reconnect would drop them.
- Each stripe beyond the first gets a channel with a local subchannel pool and
  a distinct `sgemm.stripe` argument, so it opens a TCP connection of its own
  (gRPC shares a connection among channels whose arguments are equal).
- C's chunks are small, but a summary carrying a trace can be large: up to
  64 MiB is accepted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import grpc

MAX_RECEIVE_BYTES = 64 << 20


@dataclass(frozen=True)
class ChannelConfig:
    target: str
    credentials: Optional[grpc.ChannelCredentials]  # None: plaintext
    metadata: Optional[Tuple[Tuple[str, str], ...]]  # the bearer token, on every call
    options: Tuple[Tuple[str, object], ...]

    @property
    def unix(self) -> bool:
        return self.target.startswith("unix:")

    def channel_options(self, stripe: int = 0) -> List[Tuple[str, object]]:
        opts: List[Tuple[str, object]] = [("grpc.max_receive_message_length", MAX_RECEIVE_BYTES)]
        if self.unix:
            opts.append(("grpc.client_idle_timeout_ms", 2**31 - 1))
        if stripe:
            opts += [("grpc.use_local_subchannel_pool", 1), ("sgemm.stripe", stripe)]
        return opts + list(self.options)


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ValueError(f"{what} {path}: cannot be read ({e.strerror})") from None


def make_config(target: str, *, token: Optional[str], tls: bool, tls_ca: Optional[str], tls_cert: Optional[str],
                tls_key: Optional[str], tls_server_name: Optional[str],
                channel_options: Sequence[Tuple[str, object]]) -> ChannelConfig:
    """TLS when `tls` or any TLS argument is given (the system's roots without tls_ca; mutual with
    tls_cert and tls_key)."""
    creds = None
    options = list(channel_options)
    if tls or tls_ca or tls_cert or tls_key or tls_server_name:
        if bool(tls_cert) != bool(tls_key):
            raise ValueError("a client certificate needs both tls_cert and tls_key")
        creds = grpc.ssl_channel_credentials(root_certificates=_read(tls_ca, "tls_ca") if tls_ca else None,
                                             private_key=_read(tls_key, "tls_key") if tls_key else None,
                                             certificate_chain=_read(tls_cert, "tls_cert") if tls_cert else None)
        if tls_server_name:
            options.append(("grpc.ssl_target_name_override", tls_server_name))
    metadata = (("authorization", f"Bearer {token}"),) if token else None
    return ChannelConfig(target, creds, metadata, tuple(options))


def sync_channel(cfg: ChannelConfig, stripe: int = 0) -> grpc.Channel:
    if cfg.credentials is None:
        return grpc.insecure_channel(cfg.target, options=cfg.channel_options(stripe))
    return grpc.secure_channel(cfg.target, cfg.credentials, options=cfg.channel_options(stripe))


def aio_channel(cfg: ChannelConfig, stripe: int = 0):
    from grpc import aio

    if cfg.credentials is None:
        return aio.insecure_channel(cfg.target, options=cfg.channel_options(stripe))
    return aio.secure_channel(cfg.target, cfg.credentials, options=cfg.channel_options(stripe))
