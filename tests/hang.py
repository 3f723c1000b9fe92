"""The one bound on a test's wait for an event: it only catches a hang.

A test waits on the event itself (a record read, a port open, a job running); this bound is
what it allows before calling the wait a hang, never a figure it measures: limits of 20-180 s
failed on a busy machine (issue #33), and how long things take goes in bench/.
"""

HANG_S = 600.0
