#!/usr/bin/env bash
# Every Morin & Bengio network row trained to convergence on one GPU, in parallel processes.
#
#   NLTK_DATA=<dir with corpora/brown.zip, corpora/wordnet.zip> experiments/morin2005/gpu_runs.sh [BUDGET_S] [PARALLEL] [EXTRA]
#
# BUDGET_S (default 1100): wall-clock seconds for the whole call; every row stops training by
#   BUDGET_S - 60 s (less its test pass), tests its best checkpoint and writes its result, so partial
#   results come back. A second call goes on from each row's last checkpoint (outputs/morin2005/).
# PARALLEL (default 12): processes at once, threads=1 each, all on the one GPU (trainer=gpu).
# EXTRA: overrides for every row (a smoke test: "corpus.train_size=20000 trainer.limit_train_batches=5").
# Environment: ROWS=a,b limits the rows (run.py --rows); DEVICE=cpu for a test without a GPU.
# Results: experiments/morin2005/results/*.json and README.md, as run.py writes them; with $OUT set
#   (the device machine), $OUT/morin_results.tgz holds them with every row's log and run record, and
#   $OUT/driver.log the driver's own lines.
# Missing Python packages (hydra-core, omegaconf, antlr4, nltk) are installed from .whl/ when present
# (experiments/device_env.sh).
set -u -o pipefail
cd "$(dirname "$0")/../.."
BUDGET_S=${1:-1100}
PARALLEL=${2:-12}
EXTRA=${3:-}
: "${NLTK_DATA:?set NLTK_DATA to a folder holding corpora/brown.zip and corpora/wordnet.zip}"
START=$(date +%s)
source experiments/device_env.sh  # the wheels, PYTHONPATH
export OMP_NUM_THREADS=1
DEST=${OUT:-outputs}
mkdir -p "$DEST" outputs/morin2005
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | tee "$DEST/driver.log"
python3 experiments/morin2005/run.py --parallel "$PARALLEL" --device "${DEVICE:-gpu}" --extra "$EXTRA" ${ROWS:+--rows "$ROWS"} \
  --budget-s $((BUDGET_S - 60 - $(date +%s) + START)) 2>&1 | tee -a "$DEST/driver.log"
tar czf "$DEST/morin_results.tgz" experiments/morin2005/results experiments/morin2005/README.md \
  $(ls outputs/morin2005/*.log outputs/morin2005/*/metrics.json outputs/morin2005/*/metrics.csv \
       outputs/morin2005/*/tree.json outputs/morin2005/*/bootstrap/metrics.json 2>/dev/null)
echo "results in $DEST/morin_results.tgz after $(( $(date +%s) - START )) s" | tee -a "$DEST/driver.log"
