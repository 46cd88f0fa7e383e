"""The collector pause: off inside, back on after (also after an error); a nested pause
leaves it to the outermost."""

import gc

import pytest

from telemetry.services.collector import collector_paused


def test_the_collector_is_paused_inside_and_restored_after_nesting_and_errors():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner pause does not resume it early
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()
