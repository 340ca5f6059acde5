"""Small helpers with no domain knowledge: numeric kernels, memory release, a loopback HTTP server."""
