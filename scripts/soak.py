#!/usr/bin/env python3
"""A long live run without hardware: `sonotrack run --simulate harbour` paced in real time,
a serial output on a pseudo-terminal that is unplugged for a minute, and a UDP output whose peer
is gone for a minute. Checks that every frame is accounted for, that the daemon never restarts
or stalls, and that its memory stays flat; prints the latency figures the daemon reports.

usage: scripts/soak.py [--minutes 10] [--bin target/release/sonotrack] [--workdir DIR]
"""
import argparse, json, os, pty, select, signal, socket, subprocess, sys, tempfile, time

ap = argparse.ArgumentParser()
ap.add_argument("--minutes", type=float, default=10.0)
ap.add_argument("--bin", default="target/release/sonotrack")
ap.add_argument("--workdir", default=None)
a = ap.parse_args()
work = a.workdir or tempfile.mkdtemp(prefix="sonotrack-soak-")
os.makedirs(work, exist_ok=True)
dur = a.minutes * 60

# The harbour preset's array (as `sonotrack simulate --print-preset harbour`).
sensors = [[0.0, 0.0, -4.0], [22.0, 2.0, -10.0], [4.0, 19.0, -7.0], [-12.0, 8.0, -15.0], [7.0, 5.0, -22.0]]
link = os.path.join(work, "ttySOAK")
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.bind(("127.0.0.1", 0))
port = udp.getsockname()[1]
cfg = os.path.join(work, "soak.toml")
with open(cfg, "w") as f:
    f.write(f"""[array]
sensors_m = {json.dumps(sensors)}
speed_of_sound_m_s = 1500.0
bounds_min_m = [-80.0, -80.0, -50.0]
bounds_max_m = [80.0, 80.0, 0.0]
[audio]
sample_rate_hz = 48000
[tracker]
backend = "cpu"
[output]
status_interval_s = 1.0
[[output.sink]]
kind = "udp"
address = "127.0.0.1:{port}"
[[output.sink]]
kind = "serial"
port = "{link}"
baud = 115200
format = "nmea"
""")

def new_pty():
    m, s = pty.openpty()
    name = os.ttyname(s)
    os.close(s)
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(name, link)
    return m

master = new_pty()
proc = subprocess.Popen([a.bin, "run", "--config", cfg, "--simulate", "harbour", "--seconds", str(dur)],
                        stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "daemon.log"), "w"))
t0 = time.time()
rss = []
serial_bytes = 0
datagrams = 0
last_status = None
udp_away = (dur * 0.5, dur * 0.5 + 60)
serial_away = (dur * 0.2, dur * 0.2 + 60)
udp.setblocking(False)
phase_udp = "up"
phase_serial = "up"
while proc.poll() is None:
    now = time.time() - t0
    # UDP peer away: close the socket for a minute, then listen again on the same port.
    if phase_udp == "up" and udp_away[0] <= now < udp_away[1]:
        udp.close(); phase_udp = "away"
    elif phase_udp == "away" and now >= udp_away[1]:
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); udp.bind(("127.0.0.1", port))
        udp.setblocking(False); phase_udp = "back"
    # Serial unplugged for a minute: the far end and the device node vanish, then return.
    if phase_serial == "up" and serial_away[0] <= now < serial_away[1]:
        os.close(master); os.remove(link); phase_serial = "away"
    elif phase_serial == "away" and now >= serial_away[1]:
        master = new_pty(); phase_serial = "back"
    fds = [master] if phase_serial != "away" else []
    if phase_udp != "away":
        fds.append(udp)
    r, _, _ = select.select(fds, [], [], 0.2)
    for fd in r:
        if fd is udp:
            try:
                while True:
                    d = udp.recv(65536); datagrams += 1
                    v = json.loads(d)
                    if v.get("type") == "status":
                        last_status = v
            except BlockingIOError:
                pass
        else:
            try:
                serial_bytes += len(os.read(master, 65536))
            except OSError:
                pass
    if int(now) % 10 == 0 and (not rss or now - rss[-1][0] >= 9.5):
        with open(f"/proc/{proc.pid}/status") as f:
            kb = [int(l.split()[1]) for l in f if l.startswith("VmRSS")][0]
        rss.append((now, kb))
code = proc.wait()
log = open(os.path.join(work, "daemon.log")).read()
print(f"exit code {code} after {time.time() - t0:.0f} s; {datagrams} datagrams, {serial_bytes} serial bytes")
print("RSS (s, kB):", rss[:3], "...", rss[-3:])
if rss:
    first = [k for t, k in rss if t >= 60][:1] or [rss[0][1]]
    print(f"RSS after 1 min {first[0]} kB, at the end {rss[-1][1]} kB")
if last_status:
    s = last_status
    print(f"last status over UDP: frames_in {s['frames_in']}, processed {s['frames_processed']}, dropped {s['frames_dropped']} {s['dropped']}, sink drops {s['sink_drops']}")
for line in log.splitlines():
    if line.startswith("ran ") or line.startswith("latency"):
        print(line)
