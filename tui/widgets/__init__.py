"""The monitor's widgets: each renders one record it is given and never reads a clock."""
