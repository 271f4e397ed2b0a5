"""empo2-studio: EMPO² (memory-augmented hybrid on-/off-policy RL for LLM agents) as a local studio.

Importing the package imports no torch; heavy parts load when used.
"""

__version__ = "0.1.0"
