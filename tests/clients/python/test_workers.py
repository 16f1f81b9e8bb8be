"""Stripe worker processes (Client(stripe_workers="processes"): a process per
connection of a striped request) against the real sgemm-server over TCP:
results against a float64 reference on odd shapes over 1 to 4 connections,
with C and alpha/beta, into `out`; kept results; every C handed out stays
valid while later requests write theirs; over the Unix socket with transport
"grpc"; the workers are started once and reused; the asyncio client's
requests on them, two at once;
their channels carry the client's token; a worker killed mid-request fails
that request with WorkerError well within its deadline and the next request
runs on a replacement; a stopped worker ends in DEADLINE_EXCEEDED, not a
hang; close(), interpreter exit and the client's own death leave no worker
process, no shared memory in /dev/shm and no memfd mapped behind."""

import asyncio
import concurrent.futures
import gc
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

import grpc
import numpy as np

import sgemm_client
from checks import TOLERANCE, max_error, random
from server_process import ServerProcess


def gone(pid):
    """The process has exited (a zombie left to another parent counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def wait_for(predicate, timeout_s, what):
    give_up = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > give_up:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.01)


def stripe_memfds():
    """This process's memfds of stripe workers, open or mapped."""
    fds = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds += "memfd:sgemm-stripe" in os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass  # closed meanwhile
    with open("/proc/self/maps") as f:
        maps = sum("memfd:sgemm-stripe" in line for line in f)
    return fds, maps


def shm_names(*pids):
    """Names in /dev/shm that this process or `pids` could have made (others on the host come and go)."""
    mine = [str(p) for p in (os.getpid(), *pids)]
    return {n for n in os.listdir("/dev/shm") if "sgemm" in n and any(p in n.split("-") for p in mine)}


def shm_before_test():
    """Every sgemm name in /dev/shm now: one left by another program may carry a pid a worker gets later."""
    return {n for n in os.listdir("/dev/shm") if "sgemm" in n}


class StripeWorkers(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess("--cpu-threads", "1")
        cls.rng = np.random.default_rng(int.from_bytes(os.urandom(8), "little"))

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        assert code == 0, f"sgemm-server exited {code}:\n{cls.server.log()}"

    def client(self, **kw):
        # Small chunks: the stripe plan cuts blocks of one chunk, so small shapes still spread over 4 stripes.
        return sgemm_client.Client(self.server.address, stripe_workers="processes", chunk_bytes=kw.pop("chunk", 4096),
                                   **kw)

    def test_results_over_1_to_4_connections(self):
        shm_before = shm_before_test()
        with self.client() as cl:
            for connections in (1, 2, 3, 4):
                m, n, k = (int(x) for x in self.rng.integers(20, 300, 3) | 1)
                a, b, c0 = random(self.rng, m, k), random(self.rng, k, n), random(self.rng, m, n)
                with self.subTest(connections=connections, m=m, n=n, k=k):
                    got, summary = cl.multiply(a, b, c0, -0.75, 1.5, connections=connections, timeout=60)
                    self.assertEqual((got.shape, got.dtype), ((m, n), np.float32))
                    self.assertLessEqual(max_error(got, a, b, c0, -0.75, 1.5), TOLERANCE)
                    self.assertEqual(summary.stripes, connections if connections > 1 else 0)
                    self.assertEqual(summary.bytes_sent, (m * k + k * n + m * n) * 4)
                    self.assertEqual(summary.bytes_received, m * n * 4)
                    # One connection has nothing to spread: no worker is needed for it.
                    self.assertEqual(len(cl.worker_pids()), 0 if connections == 1 else connections)
            # Without C, alpha 1; the 1 x 1 x 1 product and a single row over 4 connections (one block: 1 stripe).
            for m, n, k in ((777, 3, 5), (1, 1, 1), (1, 513, 129)):
                a, b = random(self.rng, m, k), random(self.rng, k, n)
                got, _ = cl.multiply(a, b, connections=4, timeout=60)
                self.assertLessEqual(max_error(got, a, b), TOLERANCE, f"{m}x{n}x{k}")
            pids = cl.worker_pids()
        self.assertEqual(shm_names(*pids) - shm_before, set())

    def test_out_dense_and_strided(self):
        m, n, k = 301, 67, 129
        a, b, c0 = random(self.rng, m, k), random(self.rng, k, n), random(self.rng, m, n)
        with self.client() as cl:
            out = np.full((m, n), np.nan, np.float32)
            got, _ = cl.multiply(a, b, c0, 2.0, 0.5, out=out, connections=4, timeout=60)
            self.assertIs(got, out)
            self.assertLessEqual(max_error(out, a, b, c0, 2.0, 0.5), TOLERANCE)
            wide = np.full((m, n + 10), np.nan, np.float32)
            got, _ = cl.multiply(a, b, out=wide[:, 5:5 + n], connections=3, timeout=60)
            self.assertLessEqual(max_error(wide[:, 5:5 + n], a, b), TOLERANCE)
            self.assertTrue(np.isnan(wide[:, :5]).all() and np.isnan(wide[:, 5 + n:]).all())

    def test_a_kept_result_and_a_loop_that_holds_each_c(self):
        m, n, k = 257, 129, 65
        a, b = random(self.rng, m, k), random(self.rng, k, n)
        with self.client() as cl:
            # keep: C stays on the server (send_c: and comes back too); the handle then feeds a product.
            c, summary = cl.multiply(a, b, keep=True, send_c=True, connections=4, timeout=60)
            self.assertEqual(summary.stripes, 4)
            self.assertLessEqual(max_error(c, a, b), TOLERANCE)
            h = summary.result_handle
            got, _ = cl.multiply(np.eye(m, dtype=np.float32), h, connections=1, timeout=60)
            self.assertLessEqual(max_error(got, a, b), TOLERANCE)
            cl.delete(h)
            h, summary = cl.multiply(a, b, keep=True, connections=4, timeout=60)  # no C comes back
            self.assertIsInstance(h, sgemm_client.Handle)
            self.assertEqual((h.shape, summary.bytes_received), ((m, n), 0))
            cl.delete(h)
            # Each C handed out stays valid while the next requests write theirs (the client alternates
            # between its C memfds only once a C is no longer viewed).
            results = []
            for i in range(4):
                c0 = np.full((m, n), float(i), np.float32)
                c, _ = cl.multiply(a, b, c0, 1.0, 1.0, connections=4, timeout=60)
                results.append((c, c0))
            for c, c0 in results:
                self.assertLessEqual(max_error(c, a, b, c0, 1.0, 1.0), TOLERANCE)

    def test_workers_are_reused_and_stopped_by_close(self):
        a, b = random(self.rng, 200, 100), random(self.rng, 100, 150)
        cl = self.client()
        cl.multiply(a, b, connections=4, timeout=60)
        pids = cl.worker_pids()
        self.assertEqual(len(pids), 4)
        for _ in range(3):
            got, _ = cl.multiply(a, b, connections=4, timeout=60)
            self.assertLessEqual(max_error(got, a, b), TOLERANCE)
        self.assertEqual(cl.worker_pids(), pids)
        self.assertGreater(stripe_memfds()[1], 0)  # the kept inputs, and C's mapping while `got` lives
        cl.close()
        self.assertTrue(all(gone(p) for p in pids), pids)
        self.assertEqual(cl.worker_pids(), [])
        del got
        gc.collect()
        self.assertEqual(stripe_memfds(), (0, 0))

    def _in_flight(self, cl, a, b, timeout):
        """Starts a 4-stripe multiply on another thread; returns its future once every stripe has its job."""
        pool_before = cl._workers.pool.jobs_started if cl._workers else 0
        ex = concurrent.futures.ThreadPoolExecutor(1)
        fut = ex.submit(cl.multiply, a, b, connections=4, timeout=timeout)
        ex.shutdown(wait=False)
        wait_for(lambda: cl._workers is not None and cl._workers.pool.jobs_started >= pool_before + 4, 60,
                 "the 4 stripes started")
        return fut

    def test_a_worker_killed_mid_request_fails_it_and_the_next_runs(self):
        # Stripe 2's worker is stopped before the request, so the request cannot end before the kill whatever
        # the timing: it is killed once every stripe has its job (stripes 0, 1 and 3 streaming).
        a, b = random(self.rng, 1024, 2048), random(self.rng, 2048, 1024)
        with self.client(chunk=1 << 20) as cl:
            cl.multiply(a[:512], b, connections=4, timeout=60)  # workers up (4 blocks of 128 rows)
            pids = cl.worker_pids()
            os.kill(pids[2], signal.SIGSTOP)
            fut = self._in_flight(cl, a, b, timeout=120)
            self.assertFalse(fut.done())
            t0 = time.monotonic()
            os.kill(pids[2], signal.SIGKILL)
            with self.assertRaises(sgemm_client.WorkerError) as e:
                fut.result(timeout=60)
            self.assertLess(time.monotonic() - t0, 30)
            self.assertEqual(e.exception.code, grpc.StatusCode.ABORTED)
            self.assertIn("stripe 2", e.exception.details)
            self.assertIn("signal 9", e.exception.details)
            # Usable: the next request starts a replacement for stripe 2 and keeps the others.
            got, _ = cl.multiply(a[:300], b, connections=4, timeout=120)
            self.assertLessEqual(max_error(got, a[:300], b), TOLERANCE)
            now = cl.worker_pids()
            self.assertEqual(len(now), 4)
            self.assertNotIn(pids[2], now)
            self.assertTrue(gone(pids[2]))

    def test_a_stopped_worker_ends_in_deadline_exceeded(self):
        a, b = random(self.rng, 1024, 2048), random(self.rng, 2048, 1024)
        with self.client(chunk=1 << 20) as cl:
            cl.multiply(a[:512], b, connections=4, timeout=60)
            pids = cl.worker_pids()
            os.kill(pids[1], signal.SIGSTOP)
            t0 = time.monotonic()
            fut = self._in_flight(cl, a, b, timeout=3)
            with self.assertRaises(sgemm_client.SgemmError) as e:
                fut.result(timeout=60)
            self.assertLess(time.monotonic() - t0, 3 + 2 + 10)  # the deadline, the grace, a loaded host
            self.assertEqual(e.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)
            wait_for(lambda: gone(pids[1]), 10, "the stopped worker killed")
            got, _ = cl.multiply(a[:200], b, connections=4, timeout=120)
            self.assertLessEqual(max_error(got, a[:200], b), TOLERANCE)

    def _script(self, body):
        """Runs `body` in a fresh interpreter with this client; returns the run and the workers' pids (the line
        before `body`'s own, which prints the script's pid)."""
        code = textwrap.dedent(f"""
            import os, signal, sys, numpy as np, sgemm_client
            cl = sgemm_client.Client({self.server.address!r}, stripe_workers="processes", chunk_bytes=4096)
            a = np.ones((300, 70), np.float32); b = np.ones((70, 90), np.float32)
            c, _ = cl.multiply(a, b, connections=4, timeout=60)
            assert (c == 70).all()
            print(" ".join(map(str, cl.worker_pids())), flush=True)
        """) + textwrap.dedent(body)
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        lines = run.stdout.splitlines()
        self.assertEqual(len(lines), 2, run.stdout + run.stderr)
        pids = [int(p) for p in lines[0].split()]
        self.assertEqual(len(pids), 4, run.stdout + run.stderr)
        return run, pids

    def test_interpreter_exit_stops_the_workers(self):
        shm_before = shm_before_test()
        run, pids = self._script("print(os.getpid())")  # no close(): the finalizer at exit stops them
        self.assertEqual(run.returncode, 0, run.stderr)
        wait_for(lambda: all(gone(p) for p in pids), 30, f"workers {pids} gone")
        self.assertEqual(shm_names(*pids, int(run.stdout.split()[-1])) - shm_before, set())

    def test_a_killed_client_leaves_no_worker(self):
        shm_before = shm_before_test()
        run, pids = self._script("print(os.getpid(), flush=True); os.kill(os.getpid(), signal.SIGKILL)")
        self.assertEqual(run.returncode, -signal.SIGKILL)
        wait_for(lambda: all(gone(p) for p in pids), 30, f"workers {pids} gone")
        self.assertEqual(shm_names(*pids, int(run.stdout.split()[-1])) - shm_before, set())

    def test_bad_options_name_the_field(self):
        with self.assertRaises(ValueError) as e:
            sgemm_client.Client(self.server.address, stripe_workers="fork")
        self.assertIn("stripe_workers", str(e.exception))
        with self.assertRaises(ValueError) as e:
            sgemm_client.aio.Client(self.server.address, stripe_workers="fork")
        self.assertIn("stripe_workers", str(e.exception))

    def test_asyncio_client_runs_stripes_in_workers(self):
        shm_before = shm_before_test()

        async def run():
            async with sgemm_client.aio.Client(self.server.address, stripe_workers="processes", chunk_bytes=4096) as cl:
                for m, n, k in ((301, 67, 129), (77, 513, 33)):
                    a, b, c0 = random(self.rng, m, k), random(self.rng, k, n), random(self.rng, m, n)
                    got, summary = await cl.multiply(a, b, c0, 1.25, -0.5, connections=4, timeout=60)
                    self.assertLessEqual(max_error(got, a, b, c0, 1.25, -0.5), TOLERANCE, f"{m}x{n}x{k}")
                    self.assertEqual(summary.stripes, 4)
                pids = cl.worker_pids()
                self.assertEqual(len(pids), 4)
                # Two requests at once on one loop: the pool takes them in turn, both right.
                a, b = random(self.rng, 129, 65), random(self.rng, 65, 257)
                both = await asyncio.gather(cl.multiply(a, b, connections=4, timeout=60),
                                            cl.multiply(b.T.copy(), a.T.copy(), connections=4, timeout=60))
                self.assertLessEqual(max_error(both[0][0], a, b), TOLERANCE)
                self.assertLessEqual(max_error(both[1][0], b.T.copy(), a.T.copy()), TOLERANCE)
            return pids

        pids = asyncio.run(run())
        wait_for(lambda: all(gone(p) for p in pids), 30, f"workers {pids} gone after close()")
        self.assertEqual(shm_names(*pids) - shm_before, set())


class StripeWorkersOnTheUnixSocket(unittest.TestCase):
    def test_grpc_transport_over_the_unix_socket(self):
        server = ServerProcess("--cpu-threads", "1", unix=True)
        rng = np.random.default_rng(11)
        a, b, c0 = random(rng, 333, 97), random(rng, 97, 55), random(rng, 333, 55)
        try:
            with sgemm_client.Client(server.unix_target, transport="grpc", stripe_workers="processes",
                                     chunk_bytes=4096) as cl:
                got, summary = cl.multiply(a, b, c0, 0.5, 2.0, connections=4, timeout=60)
                self.assertEqual((summary.stripes, summary.transport), (4, "grpc"))
                self.assertLessEqual(max_error(got, a, b, c0, 0.5, 2.0), TOLERANCE)
                self.assertEqual(len(cl.worker_pids()), 4)
        finally:
            self.assertEqual(server.stop(), 0)


class StripeWorkersWithAToken(unittest.TestCase):
    def test_every_worker_sends_the_token(self):
        d = tempfile.mkdtemp(prefix="sgemm-py-token-")
        tokens = os.path.join(d, "tokens.json")
        with open(tokens, "w") as f:
            f.write('{"clients": [{"name": "py", "token": "python-token-0123456789"}]}')
        server = ServerProcess("--cpu-threads", "1", "--auth-tokens", tokens)
        rng = np.random.default_rng(7)
        a, b = random(rng, 257, 65), random(rng, 65, 33)
        try:
            with sgemm_client.Client(server.address, stripe_workers="processes", chunk_bytes=4096,
                                     token="python-token-0123456789") as cl:
                got, summary = cl.multiply(a, b, connections=4, timeout=60)
                self.assertEqual(summary.stripes, 4)
                self.assertLessEqual(max_error(got, a, b), TOLERANCE)
            with sgemm_client.Client(server.address, stripe_workers="processes", chunk_bytes=4096,
                                     retries=0) as anonymous:
                with self.assertRaises(sgemm_client.SgemmError) as e:
                    anonymous.multiply(a, b, connections=4, timeout=60)
                self.assertEqual(e.exception.code, grpc.StatusCode.UNAUTHENTICATED)
        finally:
            self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    unittest.main()
