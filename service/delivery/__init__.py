"""Delivery: what a claimed message becomes on its way to a host, and who may receive it."""
