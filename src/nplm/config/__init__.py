"""nplm-train's configuration: the checked schema (`validate`) and the `--help` page. Cheap to import:
no torch, Lightning or W&B."""

from nplm.config.schema import validate

__all__ = ["validate"]
