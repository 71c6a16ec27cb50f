import sys

from xla_train.cli.main import main

sys.exit(main())
