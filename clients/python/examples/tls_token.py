#!/usr/bin/env python3
"""TLS and a bearer token (servers started with --tls-cert/--tls-key and
--auth-tokens; docs/security.md). The token may come from $SGEMM_TOKEN.

    python3 tls_token.py --server host:50051 --tls-ca ca.pem --token "$SGEMM_TOKEN"
"""
import argparse
import os

import numpy as np

import sgemm_client


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", default="localhost:50051")
    p.add_argument("--tls-ca", help="PEM CA of the server's certificate (default: the system's roots)")
    p.add_argument("--tls-cert", help="this client's certificate, for mutual TLS")
    p.add_argument("--tls-key", help="its private key")
    p.add_argument("--token", default=os.environ.get("SGEMM_TOKEN"))
    args = p.parse_args()
    with sgemm_client.Client(args.server, tls=True, tls_ca=args.tls_ca, tls_cert=args.tls_cert,
                             tls_key=args.tls_key, token=args.token) as cl:
        print(f"the server knows us as {cl.info().client!r}")
        a = np.random.default_rng().standard_normal((64, 48), dtype=np.float32)
        c, _ = cl.multiply(a, a.T, timeout=60)
    print(f"max |C - reference| = {np.max(np.abs(c - a.astype(np.float64) @ a.T.astype(np.float64))):.3e}")


if __name__ == "__main__":
    main()
