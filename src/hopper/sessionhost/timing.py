"""The session host's timings, in seconds (one home: the host, its messages, its limits)."""

from __future__ import annotations

DOUBLE_INTERRUPT = 2.0  # seconds: a second interrupt this soon closes the session
READY_FALLBACK = 60.0  # seconds after the start: type anyway if ready() never said so
# Once the agent has been at its prompt, a screen that drew something after it left the
# prompt (a turn's end, an interrupt) and then stayed still this long is back at it: a
# busy agent animates. (Its last frames may redraw only what changed, never the footer
# ready() looks for.) Not at the start: 2.1.197 drops keys while it probes the terminal.
READY_SETTLED = 2.0
REQUEST_SCAN = 0.25  # seconds between looks at requests/
LOG_SCAN = 0.25  # seconds between reads of the agent's session log
MEMORY_SCAN = 1.0  # seconds between sums of the tree's RSS
READY_QUIET = 0.5  # seconds of no output before a message is typed (a screen drawn in pieces)
# The Enter goes once the screen has answered the paste and been quiet this long (Claude
# Code 2.1.197 probes the terminal after a paste and drops keys typed meanwhile) ...
ENTER_QUIET = 0.8
ENTER_MAX = 5.0  # ... or this long after the paste, quiet or not
MARKER_GRACE = 3.0  # seconds after the Stop hook's marker for the log to show the answer
