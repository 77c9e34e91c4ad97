#!/usr/bin/env bash
# Every GPU figure of the benchmarks page in one call, for a lent accelerator (about 10 minutes on
# one H100/H200):
#   1. the paper-width meta step: PES/ELO x small_fc/Celo2 on the three 8x8 tasks
#      (benchmarks/meta_step.py -> gpu_meta_step.json);
#   2. as_optax at GPT-2 scale, 124M and 350M parameters: time and device memory of small_fc and
#      Celo2 against AdamW and Muon (benchmarks/lo_update.py -> gpu_lo_update.json);
#   3. Newton-Schulz over the devices on 1, 2, 4, ... of the machine's devices
#      (benchmarks/newton_schulz_mesh.py -> gpu_newton_schulz_mesh.json).
# Each JSON records the commit, jax version, backend and device. Nothing is asserted.
#
#   bash benchmarks/gpu.sh                    # on the accelerator
#   ELO_GPU_SCALE=toy bash benchmarks/gpu.sh  # the same steps at toy sizes (CPU; tests run this)
# OUT_DIR (default benchmarks/results) is where the JSON files go.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT_DIR:-benchmarks/results}
mkdir -p "$out"
py=${PYTHON:-python}

if [ "${ELO_GPU_SCALE:-full}" = toy ]; then
  meta=(--configs reference,elo_reference --steps 2 --warmup 0 --num-particles 2)
  update=(--kinds transformer --sizes 1M --optimizers adamw celo2 --repeats 1)
  ns=(--layers 1 --width 32 --repeats 1 --devices 1,2)
else
  meta=(--configs three_tasks,elo_three_tasks,celo2_three_tasks,elo_celo2_three_tasks --steps 20)
  update=(--kinds transformer --sizes gpt2-124M gpt2-350M --repeats 10)
  count=$("$py" -c "import jax; print(jax.device_count())")
  devices=1; list=1
  while [ $((devices * 2)) -le "$count" ]; do devices=$((devices * 2)); list="$list,$devices"; done
  ns=(--devices "$list")
fi

echo "== meta step ($(date -u +%T))"
"$py" benchmarks/meta_step.py "${meta[@]}" --cpu-devices 1 --out "$out/gpu_meta_step.json"
echo "== as_optax at model scale ($(date -u +%T))"
"$py" benchmarks/lo_update.py "${update[@]}" --out "$out/gpu_lo_update.json"
echo "== Newton-Schulz over the devices ($(date -u +%T))"
"$py" benchmarks/newton_schulz_mesh.py "${ns[@]}" --out "$out/gpu_newton_schulz_mesh.json"
echo "== done ($(date -u +%T))"
