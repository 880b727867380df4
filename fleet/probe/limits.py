"""The probe line's size limits: how much of each kind of value fleet takes from a host."""

MAX_LINE_BYTES = 4 * 1024 * 1024
MAX_GPUS = 1024
MAX_PROCESSES_PER_GPU = 4096
MAX_WARNINGS = 200
MAX_NAME_CHARS = 256
MAX_MESSAGE_CHARS = 1000
MAX_INT = 2**63 - 1  # what an SQLite INTEGER holds
KNOWN_METHODS = ("nvml", "nvidia-smi")
