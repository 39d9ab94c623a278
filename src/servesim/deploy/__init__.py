"""`servesim deploy`: launch commands and the benchmark for a simulated deployment."""
