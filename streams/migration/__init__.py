"""Moving a namespace's jobs to a new namespace with more partitions (``kafkron migrate``).

``plan.py`` decides, per job, which fires stay in the old namespace and which move (pure);
``jobs_topic.py`` reads and writes a namespace's ``jobs`` topic and its timer group's
offsets; ``cutover.py`` runs the steps in their order; ``progress.py`` saves where a
migration is, so that it can be resumed.
"""
