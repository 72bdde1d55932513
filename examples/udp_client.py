#!/usr/bin/env python3
"""Receive sonotrack's position stream over UDP and print one line per track report.

Configure an output such as

    [[output.sink]]
    kind = "udp"
    address = "127.0.0.1:5005"

then run `python3 examples/udp_client.py 5005`. Message fields: docs/stream.md.
"""
import json
import socket
import sys

port = int(sys.argv[1]) if len(sys.argv) > 1 else 5005
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind(("0.0.0.0", port))
print(f"listening on UDP {port}", file=sys.stderr)
while True:
    data, _ = sock.recvfrom(65536)
    msg = json.loads(data)
    if msg["type"] == "track":
        x, y, z = msg["pos"]
        sd = max(msg["pos_std"])
        print(f"frame {msg['seq']:6d}  track {msg['id']:3d} {msg['status']:9s} "
              f"({x:8.2f}, {y:8.2f}, {z:7.2f}) m  ±{sd:.2f} m")
    elif msg["type"] == "deleted":
        print(f"frame {msg['seq']:6d}  track {msg['id']:3d} ended ({msg['reason']})")
    elif msg["type"] == "status" and msg.get("no_track"):
        print(f"status: no confirmed track ({msg['no_track']})")
