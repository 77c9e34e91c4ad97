#!/usr/bin/env bash
# pause.sh stop|cont: pause or continue every process of the ablation study (its drivers and
# their meta-training jobs), e.g. to time a benchmark or run the tests on a quiet machine.
sig="${1:-stop}"
case "$sig" in stop|cont) ;; *) echo "usage: pause.sh stop|cont" >&2; exit 2 ;; esac
for pid in $(pgrep -f "ablation_small_fc.study|benchmarks/ablation.py|elo.cli meta-train"); do
  kill "-${sig^^}" "$pid" 2>/dev/null || true
done
echo "$(date +%T) $sig"
