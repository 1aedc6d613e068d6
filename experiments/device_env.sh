# The environment of a script run on a machine that has torch and Lightning but not the rest of nplm's
# dependencies (experiments/bench/gpu_session.sh, the experiments' gpu_*.sh), sourced in the repository root:
#
#   source experiments/device_env.sh
#
# - the Python packages such a machine may lack (hydra-core, omegaconf, antlr4-python3-runtime, nltk) are
#   installed from the wheels in .whl/ when there is such a folder and they are not importable. Fetch the
#   wheels on a machine with a network, in the repository root, and send the folder with the tree:
#       python3 -m pip download --only-binary=:all: --no-deps -d .whl \
#           hydra-core omegaconf antlr4-python3-runtime==4.9.3 nltk
#   They go to /tmp/site, which joins PYTHONPATH;
# - src/ on PYTHONPATH (nplm from this tree, not installed), W&B off, unbuffered output. The caller sets
#   OMP_NUM_THREADS.
#
# It changes nothing else: runs record the commit of the checkout they run in, or, in a copy without its
# .git (or sent with an older one), that of its PROVENANCE.json once checked against the files
# (nplm.tracking.provenance). An argument is ignored.
if [ -d .whl ] && ! python3 -c "import hydra, nltk" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} WANDB_MODE=disabled PYTHONUNBUFFERED=1
