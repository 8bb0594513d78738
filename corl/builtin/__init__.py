"""Built-in plugins: registered through the same hooks as third-party packages
(:data:`corl.plugins.BUILTIN_PLUGINS`). They import the contract and the host's helpers, never
each other."""
