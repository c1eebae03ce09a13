"""Scopes: a scope (one agent's copy-on-write workspace and branch), the one effect
path every action takes (propose, decide, materialize, commit), commands in the
sandbox, live writes through FUSE, and the project's environment."""
