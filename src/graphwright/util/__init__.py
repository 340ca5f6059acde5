"""Small helpers with no domain knowledge: numeric kernels, Arrow rows as dicts, memory release, two pieces of work side by side, a loopback HTTP server."""
