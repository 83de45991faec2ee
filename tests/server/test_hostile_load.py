# SPDX-License-Identifier: Apache-2.0
"""`servekit serve` under a hostile client, the short form (bench/hostile_load.py is the long
one): connections holding half a header or a stalled body keep no thread, so legitimate requests
are answered while hundreds of them sit open; the waiting room closes the oldest past its bounds
and what does not arrive whole in time; the transport reads pipelined and chunked requests."""
import json
import socket
import threading

import requests
from lorax import Client

from servekit_server import Server, tiny_args

PROMPT = "What is deep learning?"
HALF_HEADER = b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Ty"
STALLED_BODY = (b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 4096\r\n\r\n{\"inputs\": \"")


def metric(url, name):
    """A sample of /metrics by its name with labels, e.g. 'x' or 'x{reason="timeout"}'."""
    for line in requests.get(url + "/metrics", timeout=30).text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no metric {name}")


def waiting(url):
    return metric(url, "servekit:http_connections_waiting")


def dropped(url, reason):
    return metric(url, f'servekit:http_connections_dropped_total{{reason="{reason}"}}')


def open_many(port, n, first_bytes, source="127.0.0.1"):
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(source, 0))
        s.sendall(first_bytes)
        socks.append(s)
    return socks


def wait_until(cond, what, tries=300):
    """Polls cond (a few ms apart, bounded): the server reads the attack as it comes."""
    for _ in range(tries):
        if cond():
            return
        threading.Event().wait(0.05)
    raise AssertionError(f"never: {what}")


def recv_all(s):
    out = b""
    while True:
        b = s.recv(65536)
        if not b:
            return out
        out += b


def test_half_sent_requests_hold_no_thread_and_others_are_answered():
    # 24 worker threads (max_pending 8 + 16) against 500 connections that never finish their
    # request and keep trickling bytes: with a thread per connection, nothing else is served.
    with Server(tiny_args() + ["--max-batch", "8", "--max-pending", "8", "--read-timeout", "120",
                               "-q"]) as srv:
        socks = open_many(srv.port, 400, HALF_HEADER) + open_many(srv.port, 100, STALLED_BODY)
        stop = threading.Event()

        def trickle():
            while not stop.wait(0.5):
                for s in socks:
                    try:
                        s.send(b"a")
                    except OSError:
                        pass

        t = threading.Thread(target=trickle, daemon=True)
        t.start()
        try:
            wait_until(lambda: waiting(srv.url) >= 500,
                       "500 connections waiting")
            tgi = Client(srv.url, timeout=60)
            for i in range(10):
                r = tgi.generate(PROMPT, max_new_tokens=4, ignore_eos_token=True)
                assert r.details.generated_tokens == 4
                toks = [e.token.id for e in tgi.generate_stream(PROMPT, max_new_tokens=4,
                                                               ignore_eos_token=True)]
                assert toks == [t.id for t in r.details.tokens]
            # The attack was still there while they were answered.
            assert waiting(srv.url) >= 500
        finally:
            stop.set()
            t.join()
            for s in socks:
                s.close()
        wait_until(lambda: waiting(srv.url) <= 1,
                   "the room empties when the attacker leaves")
        assert requests.get(srv.url + "/health", timeout=30).status_code == 200


def test_past_the_per_client_bound_the_oldest_waiting_connection_is_closed():
    with Server(tiny_args() + ["--max-waiting-per-client", "50", "-q"]) as srv:
        socks = open_many(srv.port, 80, HALF_HEADER, source="127.0.0.2")
        # The 30 oldest were closed with a 503 that says why; the 50 newest still wait.
        for s in socks[:30]:
            answer = recv_all(s)
            assert answer.startswith(b"HTTP/1.1 503"), answer[:80]
            assert b"oldest" in answer
        wait_until(lambda: dropped(srv.url, "evicted") >= 30, "30 evicted")
        assert waiting(srv.url) >= 50
        # Another address is not counted against this one.
        r = requests.post(srv.url + "/generate", json={"inputs": PROMPT,
                                                       "parameters": {"max_new_tokens": 2}},
                          timeout=60)
        assert r.status_code == 200
        for s in socks:
            s.close()


def test_a_request_not_whole_in_time_gets_408_and_an_idle_connection_is_closed():
    with Server(tiny_args() + ["--read-timeout", "0.5", "-q"]) as srv:
        started = open_many(srv.port, 1, HALF_HEADER)[0]
        idle = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
        answer = recv_all(started)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
        assert b"did not arrive whole" in answer
        assert recv_all(idle) == b""  # nothing was asked: closed without an answer
        assert dropped(srv.url, "timeout") >= 2
        # A kept-alive connection that goes quiet is closed the same way, after its answer.
        with requests.Session() as sess:
            assert sess.get(srv.url + "/health", timeout=30).status_code == 200
            threading.Event().wait(1.0)
            assert sess.get(srv.url + "/health", timeout=30).status_code == 200  # reconnects


def test_pipelined_chunked_and_expect_100_requests_are_read():
    with Server(tiny_args() + ["-q"]) as srv:
        body = json.dumps({"inputs": PROMPT, "parameters": {"max_new_tokens": 3,
                                                             "ignore_eos_token": True}}).encode()
        one = (b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        last = one.replace(b"Host: x\r\n", b"Host: x\r\nConnection: close\r\n")
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
        s.sendall(one + one + last)  # three requests in one write
        answers = recv_all(s).split(b"HTTP/1.1 ")[1:]
        assert len(answers) == 3 and all(a.startswith(b"200") for a in answers)
        texts = [json.loads(a.split(b"\r\n\r\n", 1)[1])["generated_text"] for a in answers]
        assert texts[0] == texts[1] == texts[2]
        # A chunked body (requests sends a generator that way) gives the same answer.
        r = requests.post(srv.url + "/generate", data=iter([body[:10], body[10:]]),
                          headers={"Content-Type": "application/json"}, timeout=60)
        assert r.status_code == 200 and r.json()["generated_text"] == texts[0]
        # Expect: 100-continue (curl's, past 1 KiB): the interim answer, then the real one.
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
        head = last.split(b"\r\n\r\n")[0] + b"\r\nExpect: 100-continue\r\n\r\n"
        s.sendall(head)
        assert s.recv(64).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        s.sendall(body)
        answer = recv_all(s)
        assert answer.startswith(b"HTTP/1.1 200")
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["generated_text"] == texts[0]
        # A malformed request line: a 400 that says so, and the server goes on.
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
        s.sendall(b"GARBAGE\r\n\r\n")
        assert recv_all(s).startswith(b"HTTP/1.1 400")
        assert requests.get(srv.url + "/health", timeout=30).status_code == 200
