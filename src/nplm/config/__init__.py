"""nplm-train's configuration: where the Hydra configs live (`CONF_DIR`), the option rules and the
checked schema built from the registries (`nplm.config.schema.validate`)."""

from pathlib import Path

from omegaconf import OmegaConf

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"  # nplm/conf, inside the installed package


def _number(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} must be a number, not {value!r}")
    return float(value)


# A recipe's value that follows another key: `lr: ${nplm_times:1.0,${data.block_size}}` (conf/experiment/zaremba2014)
OmegaConf.register_new_resolver("nplm_times", lambda a, b: _number(a, "nplm_times' first value")
                                * _number(b, "data.block_size (the recipe's step is per unrolled step)"), replace=True)
OmegaConf.register_new_resolver("nplm_over", lambda a, b: _number(a, "nplm_over's first value")
                                / _number(b, "data.block_size (the recipe's step is per unrolled step)"), replace=True)

__all__ = ["CONF_DIR"]
