"""An example third-party plugin for pipeline-core (see README, "Write your own schedule")."""
