"""The demo: emulated pools, a short calibration, a replay four ways, the verdict."""
