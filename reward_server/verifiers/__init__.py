"""Verifier plug-ins: the interface, the registry, and one module per built-in verifier."""

from reward_server.verifiers.base import ItemBase, ResultBase, Verifier
from reward_server.verifiers.registry import PluginError, discover, register_verifier

__all__ = ["ItemBase", "PluginError", "ResultBase", "Verifier", "discover", "register_verifier"]
