"""`graphwright serve`: the HTTP API over the published indexes under one root (api)."""
