from h2m2sim.cli import entry

entry()
