#!/usr/bin/env bash
# Accuracy over several tracker seeds: ./scripts/seeds.sh [--set k=v ...]
# Scenes: $SCENE_DIRS (space-separated), default ../shared/scenes/{pier_five,office_talker}.
# Seeds 1..$NSEEDS (default 5). Prints RMSE/max per seed and the mean RMSE per scene.
set -euo pipefail
bin=${SONOTRACK:-target/release/sonotrack}
dirs=${SCENE_DIRS:-../shared/scenes/pier_five ../shared/scenes/office_talker}
for dir in $dirs; do
  line="$(basename "$dir"):"
  sum=0
  n=${NSEEDS:-5}
  for seed in $(seq 1 "$n"); do
    out=$($bin replay "$dir" --no-progress --backend cpu --set tracker.seed=$seed "$@" 2>&1 | grep '^accuracy' || true)
    rmse=$(sed -n 's/.*RMSE \([0-9.]*\) m.*/\1/p' <<<"$out")
    mx=$(sed -n 's/.*max \([0-9.]*\) m.*/\1/p' <<<"$out")
    line="$line  s$seed ${rmse:-NA}/${mx:-NA}"
    sum=$(python3 -c "print($sum + ${rmse:-99})")
  done
  echo "$line  mean $(python3 -c "print(round($sum / $n, 4))")"
done
