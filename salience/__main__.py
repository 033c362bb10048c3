import sys

from salience.cli import main

sys.exit(main())
