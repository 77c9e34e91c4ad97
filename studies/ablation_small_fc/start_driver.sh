#!/usr/bin/env bash
# Start one driver of the ablation study (studies/ablation_small_fc/study.py) from a frozen
# worktree of the study's code; run directories go to runs/ablation and results to
# studies/ablation_small_fc/results of this checkout. Two drivers can share the queue (a lock per
# job): start the second 20 s later.
#   STUDY_TREE=/work/study bash studies/ablation_small_fc/start_driver.sh >> runs/ablation/driver1.log 2>&1 &
# The study's runs were meta-trained at commit a21d0da (then under benchmarks/ablation.py):
#   git worktree add --detach /work/study a21d0da
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
tree="${STUDY_TREE:-/work/study}"
[ -d "$tree/elo" ] || { echo "no study worktree at $tree (git worktree add --detach $tree COMMIT)" >&2; exit 2; }
mkdir -p "$repo/runs/ablation"
. "$repo/.venv/bin/activate"
if [ -f "$tree/studies/ablation_small_fc/study.py" ]; then
  cd "$tree"; export PYTHONPATH="$tree"
  exec python -m studies.ablation_small_fc.study --runs-dir "$repo/runs/ablation" \
    --results-dir "$repo/studies/ablation_small_fc/results" "$@"
fi
cd "$tree"; export PYTHONPATH="$tree"  # a tree from before the move to studies/
exec python benchmarks/ablation.py --runs-dir "$repo/runs/ablation" \
  --results-dir "$repo/studies/ablation_small_fc/results" "$@"
