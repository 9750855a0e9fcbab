from .tools.train import main

raise SystemExit(main())
