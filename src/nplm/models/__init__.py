"""Feature extractors: context ids [B, n-1] -> features [B, F] for an output head."""

from nplm.models.nplm import NPLM, NPLMConfig

__all__ = ["NPLM", "NPLMConfig"]
