"""`servesim calibrate`: fit the roofline profile of one (GPU, backend) to a user's result files.

search.py holds the fit's machinery shared with benchmarks/fit_roofline.py (the parameters,
their physical bounds, the loss and the bounded Nelder-Mead search); fit.py fits result files
and reports leave-one-out errors; profile_file.py reads and writes the PROFILE.yaml that
`engine.timing: {kind: roofline, profile_file: ...}` uses.
"""
