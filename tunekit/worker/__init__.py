"""What runs inside a trial's Ray worker: the trial function, builder checks, the epoch reporter,
checkpoints, and device set-up. Imports TensorFlow (inside functions where the import cost matters).
"""
