#!/usr/bin/env bash
# Time two checkouts of elo against each other, interleaved: `benchmarks/meta_step.py` from each,
# with that checkout first on PYTHONPATH (an editable install would otherwise import the same
# elo for both), round after round, so that a slow spell of the machine falls on both.
#
# Usage: bash benchmarks/ab_commits.sh BEFORE_DIR AFTER_DIR OUT_DIR [ROUNDS] [CONFIGS] [STEPS]
#   BEFORE_DIR, AFTER_DIR  checkouts (e.g. `git worktree add /tmp/before <commit>`)
#   OUT_DIR                gets before_r<N>.json and after_r<N>.json (meta_step.py's JSON, with
#                          each checkout's commit and the load average)
#   ROUNDS                 default 3; CONFIGS: meta_step.py's, comma-separated (default
#                          reference,celo2_three_tasks,elo_celo2_three_tasks); STEPS: default 15
# Run it on a quiet machine. It measures; it asserts nothing.
set -euo pipefail
before="$(realpath "$1")"; after="$(realpath "$2")"; out="$(realpath -m "$3")"
rounds="${4:-3}"; configs="${5:-reference,celo2_three_tasks,elo_celo2_three_tasks}"; steps="${6:-15}"
mkdir -p "$out"
for round in $(seq 1 "$rounds"); do
  for side in before after; do
    dir=$([ "$side" = before ] && echo "$before" || echo "$after")
    (cd "$dir" && PYTHONPATH="$dir" python benchmarks/meta_step.py --configs "$configs" \
      --steps "$steps" --out "$out/${side}_r${round}.json" > "$out/${side}_r${round}.log" 2>&1)
    python - "$out/${side}_r${round}.json" "$side" "$round" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
for r in data["results"]:
    print(f"round {sys.argv[3]} {sys.argv[2]:6s} {data['commit']} {r['config']:24s} "
          f"min {r['seconds_per_step_min']:.4f} s median {r['seconds_per_step_median']:.4f} s")
PY
    rm -f "$out/${side}_r${round}.log"
  done
done
