"""`servesim validate`: compare a benchmark tool's result file with a simulation of it.

readers/ turn each tool's file into `MeasuredRun`s (measured.py); rebuild.py turns a
MeasuredRun into the workload and client that reproduce it; compare.py runs the simulation
and pairs each measured figure with its prediction; report.py prints and writes them.
"""
