#!/bin/bash
# The held-out evaluation on a lent accelerator (the `device` tool's machine), for SECONDS:
#
#   bash studies/celo2_headline/accelerator.sh SECONDS SOURCE_COMMIT
#
# run from the repository root with the wheels the machine lacks in .whl/ (carried; see the
# study's README). Three drivers share the chip (a lock per result), each working through its
# list in the order of decision_rule.md's addendum of 2026-11-27 until SECONDS have passed:
# (1) item 1's long horizon and the cell it adds, then the final checkpoints, stacked per
# architecture; (2) the shipped small_fc_mnist8 with its constant and its decayed step (item 4),
# then every shipped optimizer's remaining cells; (3) the selected checkpoints not yet tuned (the
# small_fc main runs', once summarised), item 4's decayed results of the Celo2 checkpoints, then
# the final checkpoints. Every 15 s the results made so far are packed into $OUT/results.tar (one
# flat file: the tool does not bring back folders nested as deep as
# evaluation/runs/<arm>/s<seed>/best/), so a run cut short loses at most 15 s of them; unpack it
# in studies/celo2_headline/results.
set -u
seconds=$1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 ELO_SOURCE_COMMIT=$2
export XLA_PYTHON_CLIENT_PREALLOCATE=false
results=studies/celo2_headline/results
marker=$(mktemp)
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
deadline=$((SECONDS + seconds))
evaluate() {  # one evaluate.py command, cut off at the deadline
    local left=$((deadline - SECONDS))
    ((left > 0)) && timeout "$left" python3 -m studies.celo2_headline.evaluate \
        --results-dir "$results" "$@"
}
(evaluate horizon --stack; evaluate added --stack; evaluate runs --checkpoints final --stack) \
    > "$OUT/runs.log" 2>&1 &
(evaluate shipped --optimizer small_fc_mnist8; evaluate shipped --decayed \
    --optimizer small_fc_mnist8; evaluate shipped) > "$OUT/shipped.log" 2>&1 &
(sleep 20 && evaluate runs --checkpoints selected --stack; evaluate decayed;
    evaluate runs --checkpoints final --stack) > "$OUT/decayed.log" 2>&1 &
pack() {
    (cd "$results" && find . -name '*.json' -newer "$marker" -print0 \
        | tar cf "$OUT/.results.tar" --null -T - && mv "$OUT/.results.tar" "$OUT/results.tar")
}
while jobs -r | grep -q .; do
    sleep 15
    pack
    nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader >> "$OUT/gpu.log"
done
wait
pack
echo "$(tar tf "$OUT/results.tar" | wc -l) results in \$OUT/results.tar"
