"""One trainer process's shell around the loop: command line, preflight, session, console."""
