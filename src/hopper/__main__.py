from hopper.cli.main import main

raise SystemExit(main())
