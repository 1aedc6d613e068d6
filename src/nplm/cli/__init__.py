"""Console commands: nplm-train (Hydra glue and its help page), nplm-eval, nplm-generate, nplm-predict,
nplm-compare, nplm-mix, and their checked argument types. Nothing else in nplm imports from here."""
