from semcheck.cli import main

raise SystemExit(main())
