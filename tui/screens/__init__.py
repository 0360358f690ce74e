"""The monitor's screens: dashboard, task table, one task's history, help."""
