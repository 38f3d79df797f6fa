from h2m2sim.cli import main

raise SystemExit(main())
