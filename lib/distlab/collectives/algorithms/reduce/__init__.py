"""Reduce algorithms: every rank's ``count`` elements reduced onto the root (one module each)."""
