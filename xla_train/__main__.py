import sys

from xla_train.cli import main

sys.exit(main())
