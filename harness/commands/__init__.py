"""One module per CLI subcommand: argument parsing and printing only; the work lives in the stage modules."""
