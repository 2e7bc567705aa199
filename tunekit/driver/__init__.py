"""The Ray driver: run and resume, the Ray session, signals, the recorder, the failure guard, progress.

Never imports TensorFlow: trials configure their own devices in their worker processes.
"""
