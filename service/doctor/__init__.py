"""``entrabot-fleet doctor``: a preflight of the configured tenant, container and settings."""

from service.doctor.run import run_doctor

__all__ = ["run_doctor"]
