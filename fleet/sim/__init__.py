"""Simulation kit for tests and the demo: simulated NVML library, fake nvidia-smi, SSH hosts."""
