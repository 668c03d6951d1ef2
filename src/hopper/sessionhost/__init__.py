"""The session host: one process per live interactive agent session (docs/contract.md).

``python -I -m hopper.sessionhost`` runs :mod:`hopper.sessionhost.host`; the
executor (executors/session.py) and the CLI talk to it through the files of
:mod:`hopper.sessionhost.contract` and its socket (:mod:`hopper.sessionhost.client`).
Standard library only, like the job supervisors.
"""
