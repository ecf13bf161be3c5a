"""The chunkwise command's subcommands: one module per API family, its handlers and parsers."""
