#!/usr/bin/env bash
# The GPU rows of experiments/tinyshakespeare_char (run.py's modern-gpu-*) on one CUDA GPU: each row its
# own driver process, all in parallel (one CPU thread each), resumable as run.py is.
#
#   experiments/tinyshakespeare_char/gpu_rows.sh [BUDGET_S] [ROWS]
#
# BUDGET_S (default 1100): seconds for the whole call; every row stops training 90 s before its end
#   (run.py --margin-s), scores its best checkpoint beside the KN5 and writes results/<row>.json, so
#   partial results come back. A second call goes on from each row's last checkpoint
#   (outputs/tinyshakespeare_char/<row>).
# ROWS (default every modern-gpu-* row of run.py): comma-separated.
# Results: experiments/tinyshakespeare_char/results/<row>.json; with $OUT set (the device machine),
#   $OUT/ts_results.tgz holds them with every row's log and run record.
# Missing Python packages (hydra-core, omegaconf, antlr4, nltk) are installed from .whl/ when present
# (experiments/device_env.sh); a copy without .git records the commit of its PROVENANCE.json
# (`python -m nplm.tracking.provenance write` in the clean checkout it is sent from).
set -u -o pipefail
cd "$(dirname "$0")/../.."
BUDGET_S=${1:-1100}
START=$(date +%s)
source experiments/device_env.sh  # the wheels, PYTHONPATH
export OMP_NUM_THREADS=1
ROWS=${2:-$(python3 -c "
import runpy; print(','.join(r for r in runpy.run_path('experiments/tinyshakespeare_char/run.py')['ROWS'] if r.startswith('modern-gpu-')))")}
mkdir -p outputs/tinyshakespeare_char
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null
for row in ${ROWS//,/ }; do
  python3 experiments/tinyshakespeare_char/run.py --rows "$row" --threads 1 --margin-s 90 \
    --budget-s $((BUDGET_S - 10 - $(date +%s) + START)) > "outputs/tinyshakespeare_char/gpu-$row.txt" 2>&1 &
done
wait
tail -n 3 outputs/tinyshakespeare_char/gpu-*.txt
if [ -n "${OUT:-}" ]; then
  tar czf "$OUT/ts_results.tgz" experiments/tinyshakespeare_char/results \
    $(ls outputs/tinyshakespeare_char/*.txt outputs/tinyshakespeare_char/*.log outputs/tinyshakespeare_char/*/metrics.json \
         outputs/tinyshakespeare_char/*/metrics.csv outputs/tinyshakespeare_char/*/train.log 2>/dev/null)
fi
echo "gpu_rows.sh: done after $(( $(date +%s) - START )) s"
