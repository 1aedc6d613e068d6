# The environment of a script a device session runs (experiments/bench/gpu_session.sh, the experiments'
# gpu_*.sh), sourced in the repository root:
#
#   source experiments/device_env.sh [COMMIT]
#
# - COMMIT (may be empty): the commit the tree was sent from; where the copy's .git (an older one can
#   travel with the tree) names another, GIT_DIR hides it, so that runs record COMMIT (NPLM_GIT_COMMIT);
# - the Python packages the device machine lacks (hydra-core, omegaconf, antlr4-python3-runtime, nltk),
#   installed from .whl/ when present (fetch them with `pip download` as /work/.library/device/README.md
#   says; carry .whl), onto PYTHONPATH;
# - src/ on PYTHONPATH, W&B off, unbuffered output. The caller sets OMP_NUM_THREADS.
if [ -n "${1:-}" ] && [ "$(git rev-parse HEAD 2>/dev/null | cut -c1-${#1})" != "$1" ]; then export GIT_DIR=/nonexistent; fi
if [ -d .whl ] && ! python3 -c "import hydra, nltk" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} WANDB_MODE=disabled PYTHONUNBUFFERED=1
