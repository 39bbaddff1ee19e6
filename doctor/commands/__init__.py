"""One module per CLI command; each function parses flags, calls doctor.app, renders, and
returns an exit code. doctor/cli.py registers them."""
