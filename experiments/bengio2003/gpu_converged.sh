#!/usr/bin/env bash
# The `converged` column of Bengio et al. (2003) Table 1 on one GPU: every network row x step size as
# its own process, all in parallel (one CPU thread each), each trained until early stopping or for
# MAX_TIME at most, then tested and mixed with the trigram by experiments/bengio2003/run.py.
#   MAX_TIME=00:00:15:00 LRS="0.128 0.384" experiments/bengio2003/gpu_converged.sh    # starts them, returns
#   experiments/bengio2003/gpu_converged.sh collect OUT_DIR    # tar of the result files and run logs
set -u
cd "$(dirname "$0")/../.."
if [ "${1:-}" = collect ]; then
  tar czf "$2/bengio2003_converged.tgz" experiments/bengio2003/results/converged-*.json \
    outputs/bengio2003/gpu-*.txt outputs/bengio2003/converged/*/metrics.json outputs/bengio2003/converged/*/metrics.csv \
    outputs/bengio2003/converged/*.log 2>/dev/null
  exit 0
fi
MAX_TIME=${MAX_TIME:-00:00:15:00}
LRS=${LRS:-0.128 0.384}
mkdir -p outputs/bengio2003
for row in mlp1 mlp3 mlp5 mlp7 mlp9; do
  for lr in $LRS; do
    setsid nohup python3 experiments/bengio2003/run.py --recipes converged --rows "$row" --lrs "$lr" --threads 1 \
      --extra "trainer=gpu logger=csv trainer.max_time=$MAX_TIME" > "outputs/bengio2003/gpu-$row-$lr.txt" 2>&1 < /dev/null &
  done
done
