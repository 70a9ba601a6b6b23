"""Broadcast algorithms: the root's ``count`` elements to every rank (one module each)."""
