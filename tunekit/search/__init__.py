"""Choosing configurations: the budget planner, the Optuna study and its Ray searcher, schedulers.

``plan`` is pure; the searcher and schedulers import Optuna and Ray and are used by the driver.
"""
