"""Delegated mode's signed-in person: device-code sign-in, the sealed token record the fleet shares, its refresh."""
