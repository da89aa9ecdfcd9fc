"""A plaintext carbon sink as a process of its own, for tests that stop it (SIGSTOP).

usage: line_sink.py PORT OUT_FILE

Listens on 127.0.0.1:PORT with a small receive buffer (so a stopped sink fills it quickly),
accepts any number of connections and appends every complete line it receives to OUT_FILE
(unbuffered, so the test can read it at any time). A connection's unterminated last line is
discarded: the relay re-sends a write it could not finish. Prints "ready" once listening.
"""

import socket
import sys
import threading

port = int(sys.argv[1])
out = open(sys.argv[2], "ab", buffering=0)
lock = threading.Lock()

srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
srv.bind(("127.0.0.1", port))
srv.listen(128)


def serve(conn):
    pending = b""
    while True:
        data = conn.recv(65536)
        if not data:
            break
        pending += data
        end = pending.rfind(b"\n")
        if end >= 0:
            with lock:
                out.write(pending[: end + 1])
            pending = pending[end + 1 :]
    conn.close()


print("ready", flush=True)
while True:
    conn, _ = srv.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
