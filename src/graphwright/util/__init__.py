"""Small helpers with no domain knowledge: numeric kernels, memory release, two pieces of work side by side, a loopback HTTP server."""
