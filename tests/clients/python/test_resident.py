"""Resident matrices from Python against the real sgemm-server: put, a handle
wherever a matrix goes (A, B or C), a kept result fed to the next product,
list and delete, handles put by another process, and ownership with tokens.
Results against a float64 numpy reference on odd shapes."""

import json
import os
import unittest

import grpc
import numpy as np

import sgemm_client
from checks import TOLERANCE, max_error, random
from server_process import ServerProcess


class Resident(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess("--cpu-threads", "1")
        cls.client = sgemm_client.Client(cls.server.address)
        cls.rng = np.random.default_rng(int.from_bytes(os.urandom(8), "little"))

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        assert cls.server.stop() == 0, cls.server.log()

    def test_put_multiply_by_handle_keep_list_delete(self):
        m, n, k = 97, 61, 143
        a, b, c0 = random(self.rng, m, k), random(self.rng, k, n), random(self.rng, m, n)
        h = self.client.put(b, label="weights", evictable=False)
        self.assertIsInstance(h, str)
        self.assertRegex(h, r"^[0-9a-f]{32}$")
        self.assertEqual(h.shape, (k, n))
        self.assertIn("rows 0-143", h.placement)
        got, summary = self.client.multiply(a, h, timeout=60)
        self.assertLessEqual(max_error(got, a, b), TOLERANCE)
        self.assertGreater(summary.bytes_sent, 0)  # A still travels
        self.assertEqual(summary.rpc, "unary")  # the handle in one message's header; B not sent
        self.assertEqual(summary.bytes_sent, 4 * m * k)
        # A and C by handle too; alpha and beta apply.
        ha, hc = self.client.put(a), self.client.put(c0)
        got, _ = self.client.multiply(ha, h, hc, 0.5, -2.0, timeout=60)
        self.assertLessEqual(max_error(got, a, b, c0, 0.5, -2.0), TOLERANCE)
        # keep: C stays on the server; its handle goes on as the next product's A.
        kept, summary = self.client.multiply(a, h, keep=True, timeout=60)
        self.assertEqual(summary.bytes_received, 0)
        self.assertEqual(summary.rpc, "stream")  # a kept result is the stream's
        self.assertEqual((str(kept), kept.shape), (summary.result_handle, (m, n)))
        w = random(self.rng, n, 29)
        got, _ = self.client.multiply(kept, w, timeout=60)
        self.assertLessEqual(max_error(got, (a.astype(np.float64) @ b.astype(np.float64)), w), 1e-3)
        # keep with send_c: both.
        c, summary = self.client.multiply(a, h, keep=True, send_c=True, keep_evictable=True, timeout=60)
        self.assertLessEqual(max_error(c, a, b), TOLERANCE)
        self.assertRegex(summary.result_handle, r"^[0-9a-f]{32}$")
        listed = {mi.handle: mi for mi in self.client.list().matrices}
        for handle in (h, ha, hc, kept, summary.result_handle):
            self.assertIn(handle, listed)
        self.assertEqual(listed[h].label, "weights")
        self.assertEqual((listed[h].rows, listed[h].cols), (k, n))
        self.assertTrue(listed[summary.result_handle].evictable)
        for handle in (h, ha, hc, kept, summary.result_handle):
            self.assertEqual(self.client.delete(handle), 0)
        with self.assertRaises(sgemm_client.SgemmError) as e:
            self.client.delete(h)
        self.assertEqual(e.exception.code, grpc.StatusCode.NOT_FOUND)
        with self.assertRaises(sgemm_client.SgemmError) as e:
            self.client.multiply(a, h, timeout=60)
        self.assertEqual(e.exception.code, grpc.StatusCode.NOT_FOUND)

    def test_a_plain_string_handle_from_another_process(self):
        # A handle as text (from another program, a file, the CLI): its shape comes from ListMatrices.
        b = random(self.rng, 41, 17)
        text = str(self.client.put(b))
        with sgemm_client.Client(self.server.address) as other:
            a = random(self.rng, 23, 41)
            got, _ = other.multiply(a, text, timeout=60)
            self.assertLessEqual(max_error(got, a, b), TOLERANCE)
            with self.assertRaises(sgemm_client.SgemmError) as e:
                other.multiply(a, "0" * 32, timeout=60)
            self.assertEqual(e.exception.code, grpc.StatusCode.NOT_FOUND)
        with self.assertRaisesRegex(ValueError, "a's columns must equal b's rows"):
            self.client.multiply(random(self.rng, 3, 5), text)
        self.client.delete(text)

    def test_keep_options_are_checked(self):
        with self.assertRaisesRegex(ValueError, "keep=True"):
            self.client.multiply(np.ones((2, 2)), np.ones((2, 2)), send_c=True)
        with self.assertRaisesRegex(ValueError, "send_c"):
            self.client.multiply(np.ones((2, 2)), np.ones((2, 2)), keep=True, out=np.zeros((2, 2), np.float32))

    def test_handles_belong_to_their_client(self):
        d = self.server.dir / "tokens"
        d.mkdir(exist_ok=True)
        (d / "tokens.json").write_text(json.dumps({"clients": [{"name": "alice", "token": "alice-token-0123456789"},
                                                               {"name": "bob", "token": "bob-token-0123456789"}]}))
        server = ServerProcess("--auth-tokens", str(d / "tokens.json"), "--cpu-threads", "1")
        try:
            with sgemm_client.Client(server.address, token="alice-token-0123456789") as alice, \
                    sgemm_client.Client(server.address, token="bob-token-0123456789") as bob:
                b = random(self.rng, 19, 7)
                h = alice.put(b)
                a = random(self.rng, 5, 19)
                got, _ = alice.multiply(a, h, timeout=60)
                self.assertLessEqual(max_error(got, a, b), TOLERANCE)
                self.assertEqual(len(bob.list().matrices), 0)  # bob does not see it
                with self.assertRaises(sgemm_client.SgemmError) as e:
                    bob.multiply(a, sgemm_client.Handle(h, h.shape), timeout=60)
                self.assertEqual(e.exception.code, grpc.StatusCode.PERMISSION_DENIED)
                with self.assertRaises(sgemm_client.SgemmError) as e:
                    bob.delete(h)
                self.assertEqual(e.exception.code, grpc.StatusCode.PERMISSION_DENIED)
                alice.delete(h)
        finally:
            self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    unittest.main()
