"""sgemm_client (clients/python) against the real sgemm-server over TCP:
results against a float64 numpy reference on odd and round shapes, with and
without C, alpha/beta, precision, kernel and split, into `out`; B sent first
(the server starts computing during the upload); one request over several
connections; traces, health and info; deadlines; clear errors for bad input;
TLS and tokens; retries while the queue is full; the CLI's .npy and raw files."""

import concurrent.futures
import os
import pathlib
import shutil
import subprocess
import tempfile
import time
import unittest

import grpc
import numpy as np

import sgemm_client
from checks import TOLERANCE, max_error, reference
from server_process import ServerProcess


def open_sockets():
    """Sockets this process holds (/proc/self/fd): each gRPC connection is one."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            pass  # closed meanwhile
    return count


class ClientAgainstServer(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess("--cpu-threads", "1")
        cls.client = sgemm_client.Client(cls.server.address)
        cls.rng = np.random.default_rng(int.from_bytes(os.urandom(8), "little"))

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        code = cls.server.stop()
        assert code == 0, f"sgemm-server exited {code}:\n{cls.server.log()}"

    def random(self, rows, cols):
        return self.rng.uniform(-1, 1, (rows, cols)).astype(np.float32)

    def check(self, m, n, k, with_c, alpha=1.0, beta=0.0, **kw):
        a, b = self.random(m, k), self.random(k, n)
        c0 = self.random(m, n) if with_c else None
        got, summary = self.client.multiply(a, b, c0, alpha, beta, timeout=120, **kw)
        self.assertEqual(got.shape, (m, n))
        self.assertEqual(got.dtype, np.float32)
        ref, scale = reference(a, b, c0, alpha, beta)
        err = np.max(np.abs(got - ref) / np.maximum(scale, 1e-30))
        self.assertLessEqual(err, TOLERANCE, f"{m}x{n}x{k} with_c={with_c} alpha={alpha} beta={beta}")
        self.assertTrue(summary.backend)
        self.assertGreater(summary.total_ms, 0)
        self.assertGreaterEqual(len(summary.devices), 1)
        return got, summary

    def test_odd_shapes(self):
        for _ in range(4):
            m, n, k = (int(x) for x in self.rng.integers(1, 300, 3) | 1)
            with self.subTest(m=m, n=n, k=k):
                self.check(m, n, k, with_c=False)
        self.check(1, 1, 1, with_c=False)
        self.check(1, 777, 3, with_c=True, alpha=0.5, beta=-1.0)

    def test_round_shapes_in_many_chunks(self):
        # A is 512x1024 floats = 2 MiB: two chunks of 1 MiB, and C comes back in two.
        self.check(512, 512, 1024, with_c=False)
        self.check(256, 256, 256, with_c=True, alpha=2.0, beta=0.5)

    def test_alpha_beta_and_c(self):
        m, n, k = (int(x) for x in self.rng.integers(2, 200, 3) | 1)
        self.check(m, n, k, with_c=True, alpha=-0.75, beta=2.0)
        self.check(m, n, k, with_c=True, alpha=0.0, beta=1.0)  # C passes through
        self.check(m, n, k, with_c=False, alpha=3.0, beta=5.0)  # no C: beta has nothing to scale

    def test_small_chunks_and_lists_and_float64_inputs(self):
        a = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
        b = np.array([[1.0, 0.5, -1.0], [2.0, 0.25, 1.0]])  # float64: sent as float32
        with sgemm_client.Client(self.server.address, chunk_bytes=8) as small:
            got, _ = small.multiply(a, b, timeout=30)
        np.testing.assert_allclose(got, np.array(a) @ b, rtol=1e-6)
        c, _ = sgemm_client.multiply(np.asfortranarray(self.random(5, 3)), self.random(3, 2),
                                     target=self.server.address, timeout=30)
        self.assertEqual(c.shape, (5, 2))

    def test_precision_kernel_split_and_out(self):
        a, b = self.random(131, 67), self.random(67, 45)
        for precision in ("fp32", "fp32-ffma", "tf32", "fp32x3"):
            got, summary = self.client.multiply(a, b, precision=precision, timeout=60)
            # The cpu backend computes fp32 for every precision, and its summary says so.
            self.assertLessEqual(max_error(got, a, b), TOLERANCE, precision)
            self.assertEqual(summary.precision_name, "fp32")
            # Every concrete kernel that ran, with its launches: 131 rows are one block of 256.
            self.assertEqual(summary.kernel_launches(), [("openblas", 1)])
            self.assertEqual(summary.kernel, "openblas")
        got, summary = self.client.multiply(a, b, split="single", timeout=60)
        self.assertEqual(summary.split, sgemm_client.pb2.SPLIT_SINGLE)
        with self.assertRaises(sgemm_client.SgemmError) as e:
            self.client.multiply(a, b, kernel="pingpong", timeout=60)
        self.assertEqual(e.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        with self.assertRaisesRegex(ValueError, "precision"):
            self.client.multiply(a, b, precision="fp16")
        # out: C is written into the caller's array (dense, or a strided view) and returned as it.
        out = np.full((131, 45), np.nan, dtype=np.float32)
        got, _ = self.client.multiply(a, b, out=out, timeout=60)
        self.assertIs(got, out)
        self.assertLessEqual(max_error(out, a, b), TOLERANCE)
        wide = np.zeros((131, 90), dtype=np.float32)
        self.client.multiply(a, b, out=wide[:, ::2], timeout=60)
        self.assertLessEqual(max_error(wide[:, ::2], a, b), TOLERANCE)
        self.assertTrue(np.all(wide[:, 1::2] == 0))
        with self.assertRaisesRegex(ValueError, r"out must be a float32 numpy array of shape \(131, 45\)"):
            self.client.multiply(a, b, out=np.zeros((131, 45)))

    def test_b_goes_first_so_the_server_computes_during_the_upload(self):
        # A in 16 KiB chunks after all of B: once B is in and A is arriving, an idle server starts (its log
        # says early_start=true). With A first, B would complete the upload and nothing could start early.
        m, n, k = 257, 129, 311
        a, b = self.random(m, k), self.random(k, n)
        # The stream (a product this small would otherwise go in one message: nothing to start early).
        with sgemm_client.Client(self.server.address, chunk_bytes=16 << 10, rpc="stream") as client:
            got, summary = client.multiply(a, b, timeout=60)
        self.assertLessEqual(max_error(got, a, b), TOLERANCE)
        self.assertEqual(summary.rpc, "stream")
        self.assertIn("early_start=true", self.server.request_log_line(summary.request_id))

    def test_one_message_each_way_when_the_product_fits(self):
        # rpc "auto": MultiplyUnary for a product that fits, with the stream's results; the stream above it.
        got, summary = self.check(37, 53, 29, with_c=True, alpha=1.5, beta=-0.5)
        self.assertEqual(summary.rpc, "unary")
        self.assertEqual(summary.bytes_received, 37 * 53 * 4)
        self.assertIn("rpc=unary", self.server.request_log_line(summary.request_id))
        got, summary = self.check(1100, 1100, 3, with_c=False)  # C alone is over the limit
        self.assertEqual(summary.rpc, "stream")
        a, b = self.random(64, 64), self.random(64, 64)
        for rpc in ("stream", "unary"):
            with sgemm_client.Client(self.server.address, rpc=rpc) as client:
                got, summary = client.multiply(a, b, op_a="t", timeout=60)
            self.assertEqual(summary.rpc, rpc)
            self.assertLessEqual(max_error(got, a.T, b), TOLERANCE)
        # Forced over the limit: refused, saying to use the stream.
        big_a, big_b = self.random(1100, 3), self.random(3, 1100)
        with sgemm_client.Client(self.server.address, rpc="unary", retries=0) as client:
            with self.assertRaises(sgemm_client.SgemmError) as caught:
                client.multiply(big_a, big_b, timeout=60)
        self.assertEqual(caught.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("use the Multiply stream", str(caught.exception))
        with self.assertRaises(ValueError):
            sgemm_client.Client(self.server.address, rpc="carrier-pigeon")

    def test_one_request_over_several_connections(self):
        m, n, k = 515, 203, 389
        a, b, c0 = self.random(m, k), self.random(k, n), self.random(m, n)
        # A thread per stripe: the connections are this process's (test_workers.py covers worker processes).
        with sgemm_client.Client(self.server.address, chunk_bytes=32 << 10, connections=4,
                                 stripe_workers="threads") as client:
            client.info()  # the first connection
            before = open_sockets()
            got, summary = client.multiply(a, b, c0, 1.5, -0.5, timeout=60)
            self.assertEqual(summary.stripes, 4)
            self.assertLessEqual(max_error(got, a, b, c0, 1.5, -0.5), TOLERANCE)
            self.assertEqual(summary.bytes_sent, (m * k + k * n + m * n) * 4)  # every stripe's payload
            # Stripes 1-3 each on a TCP connection of its own (kept for the next request).
            self.assertEqual(open_sockets() - before, 3)
            got, summary = client.multiply(a, b, connections=1, timeout=60)
            self.assertEqual(summary.stripes, 0)
            self.assertLessEqual(max_error(got, a, b), TOLERANCE)

    def test_trace_health_and_info(self):
        a, b = self.random(33, 17), self.random(17, 9)
        _, summary = self.client.multiply(a, b, trace=True, timeout=60)
        trace = summary.trace()
        self.assertTrue(trace["traceEvents"])
        _, plain = self.client.multiply(a, b, timeout=60)
        self.assertIsNone(plain.trace())
        self.assertEqual(self.client.health(), "SERVING")
        self.assertTrue(self.client.serving())
        info = self.client.info()
        self.assertEqual(info.backend, "cpu")
        self.assertFalse(info.regions_available)  # TCP
        self.assertGreaterEqual(info.load.requests_total, 2)

    def test_the_timeout_covers_the_call(self):
        # The product (32 MiB to send, 2048^3 to compute) takes hundreds of times the timeout, so it cannot
        # finish first even when a loaded host delays gRPC's deadline timer.
        with self.assertRaises(sgemm_client.SgemmError) as e:
            self.client.multiply(self.random(2048, 2048), self.random(2048, 2048), timeout=0.001)
        self.assertEqual(e.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)
        with self.assertRaisesRegex(ValueError, "timeout"):
            self.client.multiply(self.random(2, 2), self.random(2, 2), timeout=0)

    def test_bad_input_is_refused_clearly(self):
        with self.assertRaisesRegex(ValueError, "a's columns must equal b's rows"):
            self.client.multiply(np.ones((3, 4)), np.ones((5, 2)))
        with self.assertRaisesRegex(ValueError, r"c has shape \(2, 2\), expected \(3, 2\)"):
            self.client.multiply(np.ones((3, 4)), np.ones((4, 2)), np.ones((2, 2)))
        with self.assertRaisesRegex(ValueError, "2-D"):
            self.client.multiply(np.ones(4), np.ones((4, 2)))
        with self.assertRaisesRegex(ValueError, "kernel"):
            self.client.multiply(np.ones((3, 4)), np.ones((4, 2)), kernel="fastest")
        with self.assertRaises(sgemm_client.SgemmError) as e:
            self.client.empty((4, 4))
        self.assertEqual(e.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        # The server's own checks come back as SgemmError with its code and message.
        with self.assertRaises(sgemm_client.SgemmError) as e:
            self.client.multiply(np.ones((3, 4)), np.ones((4, 2)), alpha=float("nan"), timeout=30)
        self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("alpha", e.exception.details)

    def test_tls_and_a_bearer_token(self):
        # Certificates made here with the openssl CLI; the server takes TLS and tokens together.
        d = self.server.dir / "pki"
        d.mkdir(exist_ok=True)
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        run = lambda *a: subprocess.run(a, cwd=d, check=True, capture_output=True)
        run("openssl", "req", "-x509", *ec, "-days", "2", "-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=ca")
        run("openssl", "req", *ec, "-keyout", "s.key", "-out", "s.csr", "-subj", "/CN=s")
        (d / "ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        run("openssl", "x509", "-req", "-in", "s.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "2", "-out", "s.pem", "-extfile", "ext")
        (d / "tokens.json").write_text('{"clients": [{"name": "py", "token": "python-token-0123456789"}]}')
        secure = ServerProcess("--tls-cert", str(d / "s.pem"), "--tls-key", str(d / "s.key"),
                               "--auth-tokens", str(d / "tokens.json"))
        try:
            a, b = self.random(37, 41), self.random(41, 29)
            with sgemm_client.Client(secure.address, tls_ca=str(d / "ca.pem"),
                                     token="python-token-0123456789") as client:
                c, _ = client.multiply(a, b, timeout=30)
                np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=0, atol=1e-3)
                self.assertEqual(client.info().client, "py")
            with sgemm_client.Client(secure.address, tls_ca=str(d / "ca.pem"), retries=0) as anonymous:
                with self.assertRaises(sgemm_client.SgemmError) as e:
                    anonymous.multiply(a, b, timeout=30)
                self.assertEqual(e.exception.code, grpc.StatusCode.UNAUTHENTICATED)
        finally:
            self.assertEqual(secure.stop(), 0, secure.log())

    def test_over_the_size_limit_is_resource_exhausted(self):
        small = ServerProcess("--max-matrix-elements", "1000")
        try:
            with self.assertRaises(sgemm_client.SgemmError) as e:
                sgemm_client.multiply(np.ones((40, 40)), np.ones((40, 2)), target=small.address, timeout=30)
            self.assertEqual(e.exception.code, grpc.StatusCode.RESOURCE_EXHAUSTED)
        finally:
            self.assertEqual(small.stop(), 0)

    def test_unavailable_is_retried_while_the_queue_is_full(self):
        busy = ServerProcess("--max-in-flight", "1", "--max-queued", "0", "--cpu-threads", "1")
        try:
            with sgemm_client.Client(busy.address, retries=200, backoff_s=0.01, max_backoff_s=0.05) as client:
                # One product holds the only slot (2048^3 on one CPU thread: a few tenths of a second at
                # least); once the server counts it in flight, five more callers find no slot and no
                # queue, are turned away, and retry until they get in.
                big_a, big_b = self.random(2048, 2048), self.random(2048, 2048)
                a, b = self.random(512, 512), self.random(512, 512)
                with concurrent.futures.ThreadPoolExecutor(6) as pool:
                    holder = pool.submit(lambda: client.multiply(big_a, big_b, timeout=120)[0])
                    deadline = time.monotonic() + 60
                    while client.info(timeout=10).load.in_flight < 1:
                        self.assertFalse(holder.done(), "the holding product ended before it was seen in flight")
                        self.assertLess(time.monotonic(), deadline, "the holding product never went in flight")
                        time.sleep(0.005)
                    results = list(pool.map(lambda _: client.multiply(a, b, timeout=120)[0], range(5)))
                    held = holder.result()
                np.testing.assert_allclose(held, big_a.astype(np.float64) @ big_b.astype(np.float64), rtol=0,
                                           atol=2e-3)
                ref = a.astype(np.float64) @ b.astype(np.float64)
                for got in results:
                    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-3)
                self.assertGreater(client.unavailable_retries, 0)
            with sgemm_client.Client("127.0.0.1:1", retries=2, backoff_s=0.01) as nobody:
                with self.assertRaises(sgemm_client.SgemmError) as e:
                    nobody.multiply(np.ones((2, 2)), np.ones((2, 2)), timeout=10)
                self.assertEqual(e.exception.code, grpc.StatusCode.UNAVAILABLE)
                self.assertEqual(nobody.unavailable_retries, 2)
        finally:
            self.assertEqual(busy.stop(), 0)

    def test_cli_submit_with_npy_and_raw_files(self):
        cli = os.environ["SGEMM_CLIENT_BIN"]
        tmp = pathlib.Path(tempfile.mkdtemp(prefix="sgemm-py-cli-"))
        try:
            m, n, k = 37, 19, 53
            a, b, c0 = self.random(m, k), self.random(k, n), self.random(m, n)
            np.save(tmp / "a.npy", a)
            np.save(tmp / "b.npy", np.asfortranarray(b.astype(np.float64)))  # float64, Fortran order
            np.save(tmp / "c.npy", c0)
            run = subprocess.run([cli, "submit", "--server", self.server.address, "--a", str(tmp / "a.npy"),
                                  "--b", str(tmp / "b.npy"), "--c", str(tmp / "c.npy"), "--alpha", "1.5", "--beta",
                                  "-0.5", "--out", str(tmp / "out.npy"), "--verify"],
                                 capture_output=True, text=True, timeout=60)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
            self.assertIn("PASS", run.stdout)
            got = np.load(tmp / "out.npy")
            self.assertEqual((got.shape, got.dtype), ((m, n), np.float32))
            ref, scale = reference(a, b, c0, 1.5, -0.5)
            self.assertLessEqual(np.max(np.abs(got - ref) / scale), TOLERANCE)

            a.tofile(tmp / "a.f32")
            b.tofile(tmp / "b.f32")
            run = subprocess.run([cli, "submit", "--server", self.server.address, "--a", str(tmp / "a.f32"),
                                  "--b", str(tmp / "b.f32"), "--m", str(m), "--n", str(n), "--k", str(k),
                                  "--out", str(tmp / "out.f32")], capture_output=True, text=True, timeout=60)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
            got = np.fromfile(tmp / "out.f32", dtype="<f4").reshape(m, n)
            ref, scale = reference(a, b, None, 1.0, 0.0)
            self.assertLessEqual(np.max(np.abs(got - ref) / scale), TOLERANCE)

            run = subprocess.run([cli, "submit", "--server", self.server.address, "--a", str(tmp / "a.f32"),
                                  "--b", str(tmp / "b.npy"), "--out", str(tmp / "x.npy")],
                                 capture_output=True, text=True, timeout=60)
            self.assertEqual(run.returncode, 2)
            self.assertIn("give --m", run.stderr)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
