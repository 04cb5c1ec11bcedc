"""Reproductions of published experiments with this project's scheduling rules (``td3sched reproduce``)."""
