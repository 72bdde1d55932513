#!/usr/bin/env bash
# A day of audio through the replay and the daemon paths, their memory sampled every second
# (BENCHMARKS.md, "Reliability"). About 16 minutes to write the scene (2.8 GB) and 25 minutes for
# the two runs side by side on two cores.
# usage: scripts/day_soak.sh [WORKDIR]   (default: a new temporary directory)
set -euo pipefail
bin=$(realpath "${SONOTRACK:-target/release/sonotrack}")
sampler=$(realpath "$(dirname "$0")/rss_sample.py")
work=${1:-$(mktemp -d -t sonotrack-day-XXXXXX)}
mkdir -p "$work" && cd "$work"
sensors='[[0.0, 0.0, -4.0], [22.0, 2.0, -10.0], [4.0, 19.0, -7.0], [-12.0, 8.0, -15.0]]'
cat > spec.toml <<SPEC
description = "soak, a day"
sensors_m = $sensors
speed_of_sound_m_s = 1500.0
sample_rate_hz = 4000
duration_s = 86400.0
snr_db = 10.0
bounds_min_m = [-80.0, -80.0, -50.0]
bounds_max_m = [80.0, 80.0, 0.0]
[[source]]
signal = "ship"
path = { kind = "turn", start_m = [-30.0, -10.0, -5.0], speed_m_s = 1.0, heading_deg = 10.0, turn_rate_deg_s = 2.0 }
SPEC
cat > day.toml <<CFG
[array]
sensors_m = $sensors
speed_of_sound_m_s = 1500.0
bounds_min_m = [-80.0, -80.0, -50.0]
bounds_max_m = [80.0, 80.0, 0.0]
[audio]
sample_rate_hz = 4000
[tracker]
backend = "cpu"
particles = 1024
[output]
status_interval_s = 1.0
[[output.sink]]
kind = "jsonl"
path = "$work/daemon_out.jsonl"
CFG
[ -f scene/audio_s16.wav ] || "$bin" simulate --s16 --spec spec.toml --out scene
rm -f scene/truth.csv
"$sampler" replay "$bin" replay scene --no-progress --no-bound --backend cpu \
  --set tracker.particles=1024 --out replay_out.jsonl --summary-json replay_summary.json &
"$sampler" daemon "$bin" run --config day.toml --input scene/audio_s16.wav --speed 1000 &
wait
cat replay.json daemon.json
tail -3 daemon.log
