"""An example third-party plugin for pipeline-core (see docs/guide/schedule-plugin.md, "Write your own schedule")."""
