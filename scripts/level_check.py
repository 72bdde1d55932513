#!/usr/bin/env python3
"""Check the stream's received level (`level_dbfs`) against simulated scenes.

For each preset and SNR: simulate 6 s (16-bit), replay it, and compare the median `level_dbfs`
of the confirmed reports with the source's power at the array, taken as the recording's mean
channel power times SNR / (1 + SNR) (the simulator's SNR is per channel).

    python3 scripts/level_check.py [--bin target/release/sonotrack]
"""
import argparse
import glob
import json
import statistics
import struct
import subprocess
import tempfile

import numpy as np


def read_s16(path):
    b = open(path, "rb").read()
    i, ch = 12, None
    while i < len(b):
        cid, size = b[i:i + 4], struct.unpack("<I", b[i + 4:i + 8])[0]
        if cid == b"fmt ":
            ch = struct.unpack("<H", b[i + 10:i + 12])[0]
        if cid == b"data":
            x = np.frombuffer(b[i + 8:i + 8 + size], dtype=np.int16)
            return x.reshape(-1, ch).astype(float) / 32768
        i += 8 + size + (size & 1)
    raise ValueError(f"{path}: no data chunk")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/sonotrack")
    a = ap.parse_args()
    print("| preset | SNR (dB) | reports | median level_dbfs | source power (dBFS) | difference (dB) |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for preset in ["harbour", "tetra", "room"]:
            for snr in [20, 0]:
                d = f"{tmp}/{preset}{snr}"
                subprocess.run([a.bin, "-q", "simulate", "--s16", "--preset", preset,
                                "--duration", "6", f"--snr-db={snr}", "--out", d], check=True)
                subprocess.run([a.bin, "-q", "replay", d, "--no-bound", "--no-progress",
                                "--out", d + ".jsonl"], check=True)
                msgs = [json.loads(l) for l in open(d + ".jsonl")]
                levels = [m["level_dbfs"] for m in msgs if m["type"] == "track"
                          and m["status"] == "confirmed" and "level_dbfs" in m]
                x = read_s16(glob.glob(d + "/audio*.wav")[0])
                x = x - x.mean(axis=0)
                total = 10 * np.log10(np.mean(x ** 2))
                source = total - 10 * np.log10(1 + 10 ** (-snr / 10))
                med = statistics.median(levels)
                print(f"| {preset} | {snr} | {len(levels)} | {med:.1f} | {source:.1f} | {med - source:+.1f} |")


if __name__ == "__main__":
    main()
