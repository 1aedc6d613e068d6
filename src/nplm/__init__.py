"""nplm: experiments with neural probabilistic language models.

Bengio, Ducharme, Vincent & Jauvin (2003), "A Neural Probabilistic Language Model", JMLR 3;
Morin & Bengio (2005), "Hierarchical Probabilistic Neural Network Language Model", AISTATS.
"""

__version__ = "0.1.0"
