"""The accounting rules as pure functions: no database, no clock, no floats.

``intervals`` is half-open UTC interval algebra and the time-state partition; ``money`` is
cent rounding and largest-remainder splitting. Statement code composes them over data that
selectors load, so every rule can be tested exactly and in isolation.
"""
