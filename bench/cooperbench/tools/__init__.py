"""Maintenance scripts of the CooperBench harness (not imported at run time)."""
