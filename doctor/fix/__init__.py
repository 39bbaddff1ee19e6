"""Fix planning: from findings to one verified set of pins, environment settings and config
changes (plan.py), the flash-attn wheel that fits (wheels.py), the requirements file writer
(pinfile.py) and the release catalogue refresh (catalogue.py)."""
