"""What the Python e2e tests check results against: common/reference_gemm.h's
rule, a float64 numpy reference and an error relative to |alpha||A||B| + |beta||C|."""

import numpy as np

TOLERANCE = 1e-4


def reference(a, b, c=None, alpha=1.0, beta=0.0):
    """(C in float64, the scale each element's error is measured against)."""
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    ref = alpha * (a64 @ b64)
    scale = abs(alpha) * (np.abs(a64) @ np.abs(b64))
    if c is not None:
        ref += beta * np.asarray(c, np.float64)
        scale += abs(beta) * np.abs(np.asarray(c, np.float64))
    return ref, scale


def max_error(got, a, b, c=None, alpha=1.0, beta=0.0):
    ref, scale = reference(a, b, c, alpha, beta)
    return float(np.max(np.abs(np.asarray(got, np.float64) - ref) / np.maximum(scale, 1e-30)))


def random(rng, rows, cols):
    return rng.uniform(-1, 1, (rows, cols)).astype(np.float32)
