"""Errors shared by the config checks of every domain (kept apart so that `kvspec.config` can
call the domain checks without an import cycle)."""


class ConfigError(ValueError):
    """A config value is wrong; the message names the key."""
