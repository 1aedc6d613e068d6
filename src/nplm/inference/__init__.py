"""Using a trained model: prompting and sampling, and its mixture with an n-gram baseline."""

# Unknown prompt words (nplm-generate, nplm-predict): <unk>, or Bengio et al.'s expected vector.
# Here, not in prompting.py, so that the commands check their flags before torch loads.
OOV_MODES = ("unk", "bengio")
