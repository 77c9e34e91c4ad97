#!/bin/bash
# The held-out evaluation on a lent accelerator (the `device` tool's machine), for SECONDS:
#
#   bash studies/celo2_headline/accelerator.sh SECONDS SOURCE_COMMIT
#
# run from the repository root with the wheels the machine lacks in .whl/ (carried; see the
# study's README). Three drivers share the chip (a lock per result), each working through its
# list in the README's order until SECONDS have passed: (1) the selected checkpoints stacked per
# architecture, then item 1's long horizon, then the final checkpoints; (2) the baselines; (3)
# item 4's decayed schedule. Every 15 s the results made so far are packed into
# $OUT/results.tar (one flat file: the tool does not bring back folders nested as deep as
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
(evaluate runs --checkpoints selected --stack; evaluate horizon --stack;
    evaluate runs --checkpoints final --stack) > "$OUT/runs.log" 2>&1 &
evaluate baselines > "$OUT/baselines.log" 2>&1 &
(sleep 20 && evaluate decayed) > "$OUT/decayed.log" 2>&1 &
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
