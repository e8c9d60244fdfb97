"""Test configuration: a fixed, derandomized hypothesis profile so runs are repeatable."""
import os

from hypothesis import HealthCheck, settings

settings.register_profile("dynajax", derandomize=True, max_examples=25, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dynajax"))
