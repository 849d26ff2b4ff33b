"""The persistent decode layer on the CPU: its schedule run on virtual SMs, and a model of its time."""
