"""Planners: whatever suggests directives (issue 6). Only the built-in rule planner so far."""
