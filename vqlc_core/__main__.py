from vqlc_core.build.cli import main

raise SystemExit(main())
