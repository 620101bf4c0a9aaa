"""A tiny network peer run inside a test host (``python peer.py MODE HOST PORT``).

``tcp-echo``: accept TCP connections and echo what each sends. ``udp-log``: print every UDP datagram received,
one per line, flushed. Both print ``ready`` once listening."""

from __future__ import annotations

import socket
import sys
import threading


def tcp_echo(host: str, port: int) -> None:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((host, port))
    srv.listen()
    print("ready", flush=True)

    def serve(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(4096):
                conn.sendall(data)

    while True:
        conn, _ = srv.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


def udp_log(host: str, port: int) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((host, port))
    print("ready", flush=True)
    while True:
        data, addr = sock.recvfrom(4096)
        print(f"{addr[0]} {data.decode()}", flush=True)


if __name__ == "__main__":
    mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    {"tcp-echo": tcp_echo, "udp-log": udp_log}[mode](host, port)
