"""`make reliability`: faults injected into the real stack, with the figures each run saw.

Every scenario runs on its own scratch database, checks the SQL invariants after each round
(invariants.py) and compares every finished job with a sequential count of its input.
"""
