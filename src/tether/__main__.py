from tether.cli import run

run()
