"""Reusable test kits. Importing this package needs pytest; the core never imports it."""
