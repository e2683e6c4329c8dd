"""The local stack the demo, the tests and the benchmarks run on: Azurite and the Graph emulator."""
