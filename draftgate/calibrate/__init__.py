"""The four-arm calibration protocol: run, fit, report."""
