"""Renderings of a compiled schedule: JSON (the contract of docs/document-format.md) and text for people."""
