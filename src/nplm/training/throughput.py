"""An epoch's training time (validation inside it left out), its tokens per second and model FLOP
utilisation (`train/mfu`, from the run's `nplm.training.flops.FlopReport`)."""

from __future__ import annotations

import logging
import time

from nplm.training.flops import FlopReport

log = logging.getLogger(__name__)


class EpochClock:
    """Seconds of training in the current epoch; `pause` and `resume` around a validation inside it."""

    def __init__(self):
        self.seconds, self.since = 0.0, time.perf_counter()

    def pause(self) -> None:
        self.seconds += time.perf_counter() - self.since

    def resume(self) -> None:
        self.since = time.perf_counter()

    def elapsed(self) -> float:
        return self.seconds + (time.perf_counter() - self.since)


def speed_figures(tokens: int, seconds: float, flops: FlopReport | None,
                  devices: int) -> tuple[dict[str, float], FlopReport | None]:
    """(`train/tokens_per_s`, `train/mfu` where `flops` is known, `train/epoch_time_s`; the report) of an
    epoch that trained `tokens` tokens on `devices` devices. An MFU above 100% is kept as it is, with a
    warning: the device's peak is below what the run achieved."""
    rate = tokens / max(seconds, 1e-9)
    out = {"train/tokens_per_s": rate}
    if flops is not None:  # model FLOP utilisation of the run's devices
        out["train/mfu"] = mfu = flops.mfu(rate, devices)
        if mfu > 1:
            log.warning("train/mfu %.1f%% is above 100%%: the peak, %.4g FLOP/s (%s), is below this run's own rate; "
                        "a peak measured while another job used the device is too low (remove its entry from "
                        "<paths.data_dir>/peak_flops.json to measure it again)", 100 * mfu, flops.peak.flops,
                        flops.peak.source)
    out["train/epoch_time_s"] = seconds
    return out, flops
