"""nplm: experiments with neural probabilistic language models.

Bengio, Ducharme, Vincent & Jauvin (2003), "A Neural Probabilistic Language Model", JMLR 3;
Morin & Bengio (2005), "Hierarchical Probabilistic Neural Network Language Model", AISTATS.

Installed as the distribution `nplm-lab` (`pip install nplm-lab`), imported as `nplm`.
"""

# The one place the version is written: pyproject.toml reads it (`[tool.setuptools.dynamic]`), every
# command's `--version` prints it and every run's metrics.json records it (`nplm_version`).
__version__ = "0.2.0"

# The Python API (nplm.api), loaded on first use: `import nplm` stays cheap (no torch, no Lightning).
_API = ("train", "load", "compare", "Run", "Model", "Table")


def __getattr__(name: str):
    if name in _API:
        from nplm import api

        return getattr(api, name)
    raise AttributeError(f"module 'nplm' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])
