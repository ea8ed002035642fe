from symjac.cli._main import main

raise SystemExit(main())
