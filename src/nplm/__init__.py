"""nplm: experiments with neural probabilistic language models.

Bengio, Ducharme, Vincent & Jauvin (2003), "A Neural Probabilistic Language Model", JMLR 3;
Morin & Bengio (2005), "Hierarchical Probabilistic Neural Network Language Model", AISTATS.

Installed as the distribution `nplm-lab` (`pip install nplm-lab`), imported as `nplm`.
"""

# The one place the version is written: pyproject.toml reads it (`[tool.setuptools.dynamic]`), every
# command's `--version` prints it and every run's metrics.json records it (`nplm_version`).
__version__ = "0.2.0"
