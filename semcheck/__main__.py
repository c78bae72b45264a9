from semcheck.cli import run

run()
