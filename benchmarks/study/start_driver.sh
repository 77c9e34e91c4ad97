#!/usr/bin/env bash
# Start one driver of the ablation study (benchmarks/ablation.py) from a frozen worktree of the
# study's code; run directories go to runs/ablation and results to benchmarks/results/ablation of
# this checkout. Two drivers can share the queue (a lock per job): start the second 20 s later.
#   STUDY_TREE=/work/study bash benchmarks/study/start_driver.sh >> runs/ablation/driver1.log 2>&1 &
# The study's runs were meta-trained at commit a21d0da: git worktree add --detach /work/study a21d0da
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
tree="${STUDY_TREE:-/work/study}"
[ -f "$tree/benchmarks/ablation.py" ] || { echo "no study worktree at $tree (git worktree add --detach $tree a21d0da)" >&2; exit 2; }
mkdir -p "$repo/runs/ablation"
cd "$tree"
. "$repo/.venv/bin/activate"
export PYTHONPATH="$tree"
exec python benchmarks/ablation.py --runs-dir "$repo/runs/ablation" \
  --results-dir "$repo/benchmarks/results/ablation" "$@"
