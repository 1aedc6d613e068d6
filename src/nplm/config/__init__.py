"""nplm-train's configuration: where the Hydra configs live (`CONF_DIR`), the option rules and the
checked schema built from the registries (`nplm.config.schema.validate`)."""

from pathlib import Path

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"  # nplm/conf, inside the installed package

__all__ = ["CONF_DIR"]
