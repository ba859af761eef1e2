import sys

from verl_pdbg_conf.cli import main

sys.exit(main())
