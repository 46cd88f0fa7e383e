import threading

import pytest

from telemetry.agent.watchdog import NvmlStall, Watchdog


def test_results_and_errors_pass_through():
    wd = Watchdog("t")
    assert wd.call(lambda: 42, 1.0) == 42
    with pytest.raises(ZeroDivisionError):
        wd.call(lambda: 1 / 0, 1.0)
    wd.close()


def test_a_hung_call_is_reported_and_blocks_further_calls_until_it_returns():
    wd = Watchdog("t")
    release = threading.Event()

    def hang():
        wd.current_call = "nvmlDeviceGetPowerUsage"
        release.wait(5)
        return "late"

    with pytest.raises(NvmlStall) as first:
        wd.call(hang, 0.02)
    assert first.value.call == "nvmlDeviceGetPowerUsage"
    assert first.value.still_running is False
    assert wd.stalled
    with pytest.raises(NvmlStall) as second:
        wd.call(lambda: 1, 0.02)
    assert second.value.still_running is True
    release.set()
    assert wait_until(lambda: not wd.stalled)
    assert wd.call(lambda: 7, 1.0) == 7
    wd.close()


def wait_until(condition, seconds: float = 2.0) -> bool:
    for _ in range(int(seconds / 0.005)):
        if condition():
            return True
        threading.Event().wait(0.005)
    return False
