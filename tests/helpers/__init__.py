"""Helpers the test modules share: constants, items and functions, imported from here (a test
module is never imported as a library of another's)."""
