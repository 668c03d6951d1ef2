"""hopper: a job service with a filesystem API.

Prompts dropped into ``<root>/inbox`` are claimed by an atomic rename into
``<root>/runs/<job_id>/``, run by a per-job supervisor, and finalized into
``<root>/processed/``. See docs/contract.md for the files and their meaning.
"""

__version__ = "0.1.0"
