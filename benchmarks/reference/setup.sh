#!/usr/bin/env bash
# Recreate the reference venv for benchmarks/reference/pes_small_fc.py from scratch.
#
# Usage: bash benchmarks/reference/setup.sh SOURCE [VENV] [--with-elo]
#   SOURCE  google/learned_optimization: a git directory (e.g. the bare mirror that the
#           search tool's `fetch github:google/learned_optimization` returns) or an already
#           extracted source tree (the directory holding setup.py).
#   VENV    where to create the venv (default /work/refbench/.venv); must be OUTSIDE the repo.
#           A git SOURCE is extracted to $(dirname VENV)/learned_optimization.
#   --with-elo  also install this repository (`pip install --no-deps -e`) and elo's runtime
#           dependencies at versions that work with jax 0.9.0 (see the section
#           "elo under jax 0.9.0" in benchmarks/reference/README.md).
#
# Versions are pinned (top-level below, everything else through requirements-reference.txt,
# the `pip freeze` of the venv this was tested with). Only PyPI is used.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
with_elo=0
args=()
for a in "$@"; do
  case "$a" in
    --with-elo) with_elo=1 ;;
    *) args+=("$a") ;;
  esac
done
[ "${#args[@]}" -ge 1 ] || { sed -n 2,15p "$0"; exit 2; }
src="${args[0]}"
venv="${args[1]:-/work/refbench/.venv}"
python="${PYTHON:-python3.11}"
command -v "$python" >/dev/null || python=python3

case "$(realpath -m "$venv")/" in
  "$repo"/*) echo "refusing: VENV must be outside the repository ($repo)" >&2; exit 2 ;;
esac

# 1. The source, and its commit.
if git --git-dir="$src" rev-parse --verify -q HEAD >/dev/null 2>&1 && [ ! -f "$src/setup.py" ]; then
  dest="$(dirname "$(realpath -m "$venv")")/learned_optimization"
  commit="$(git --git-dir="$src" rev-parse HEAD)"
  echo "extracting learned_optimization $commit to $dest"
  rm -rf "$dest"
  mkdir -p "$dest"
  # Blob by blob rather than `git archive`: a partial mirror may lack a few large data files
  # (learned_optimization/baselines/data/*.json, not needed here); those are skipped.
  git --git-dir="$src" ls-tree -r HEAD | while read -r mode _type obj path; do
    if ! git --git-dir="$src" cat-file -e "$obj" 2>/dev/null; then
      echo "  skipped (blob not in the mirror): $path"
      continue
    fi
    mkdir -p "$dest/$(dirname "$path")"
    if [ "$mode" = 120000 ]; then
      ln -s "$(git --git-dir="$src" cat-file blob "$obj")" "$dest/$path"
    else
      git --git-dir="$src" cat-file blob "$obj" >"$dest/$path"
      if [ "$mode" = 100755 ]; then chmod +x "$dest/$path"; fi
    fi
  done
  echo "$commit" >"$dest/LEARNED_OPTIMIZATION_COMMIT"
else
  dest="$(realpath "$src")"
  [ -f "$dest/setup.py" ] || { echo "no setup.py in $dest" >&2; exit 2; }
  if [ ! -f "$dest/LEARNED_OPTIMIZATION_COMMIT" ] && git -C "$dest" rev-parse HEAD >/dev/null 2>&1; then
    git -C "$dest" rev-parse HEAD >"$dest/LEARNED_OPTIMIZATION_COMMIT"
  fi
fi

# 2. The venv (tested with Python 3.11.7).
rm -rf "$venv"
"$python" -m venv "$venv"
pip=("$venv/bin/pip" install -c "$here/requirements-reference.txt")
"$venv/bin/pip" install --upgrade pip
"${pip[@]}" jax==0.9.0 jaxlib==0.9.0 dm-haiku==0.0.17 flax==0.12.6 optax==0.2.8 chex==0.1.92 \
  gin-config==0.5.0 absl-py==2.5.1 numpy==2.4.6 pyarrow==26.0.1 \
  tensorflow-cpu==2.21.0 tensorflow-datasets==4.9.10
"$venv/bin/pip" install --no-deps -e "$dest"

if [ "$with_elo" = 1 ]; then
  "${pip[@]}" jax==0.9.0 jaxlib==0.9.0 equinox==0.13.8 jaxtyping==0.3.11 beartype==0.23.1 \
    datasets==5.2.0 safetensors==0.8.0 tqdm==4.70.1
  "$venv/bin/pip" install --no-deps -e "$repo"
fi

# 3. Check: the modules the harness uses import.
"$venv/bin/python" - <<'EOF'
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import jax, jaxlib
from learned_optimization.outer_trainers import truncated_pes, lopt_truncated_step  # noqa: F401
from learned_optimization.outer_trainers import truncation_schedule, gradient_learner  # noqa: F401
from learned_optimization.learned_optimizers import adafac_mlp_lopt  # noqa: F401
from learned_optimization.tasks.fixed import image_mlp  # noqa: F401
from learned_optimization.tasks import task_augmentation  # noqa: F401
print("reference venv ok: jax", jax.__version__, "jaxlib", jaxlib.__version__)
EOF
echo "run: $venv/bin/python $repo/benchmarks/reference/pes_small_fc.py --steps 30 --warmup 3"
