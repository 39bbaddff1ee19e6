"""Formatters: one pure function per output format (Report -> str)."""
