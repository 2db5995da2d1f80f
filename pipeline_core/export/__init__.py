"""Renderings of a compiled schedule: JSON (the FORMAT.md contract) and text for people."""
