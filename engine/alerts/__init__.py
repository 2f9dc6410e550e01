"""Alerts of a supervised run, torch-free: the rules as a pure state machine with hysteresis
and throttling (``rules``), the watch that feeds them step reports, hardware readings and a
clock and records what fires (``watch``), and the health board that says whether an alert
blocks risky directives.
"""
