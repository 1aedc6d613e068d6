"""`optimizer=sgd`: stochastic gradient descent (Bengio et al. 2003, section 4), lazy rows of C."""

from __future__ import annotations

from nplm.config.rules import Float
from nplm.optimizers import register_optimizer
from nplm.optimizers.lazy import LazySGD


@register_optimizer("sgd", keys={"momentum": Float(ge=0, lt=1, doc="heavy-ball momentum (0: plain SGD)")})
def sgd(groups: list[dict], lr: float, momentum: float = 0.0, fused: bool = True):
    """SGD with Bengio et al.'s schedule (lr_decay); row-sparse updates of C without momentum."""
    return LazySGD(groups, lr=lr, momentum=momentum, fused=fused)
