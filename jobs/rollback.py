"""Make a published version current again (published as a new version; nothing is lost).

    ray job submit --working-dir . -- python jobs/rollback.py --index DIR_OR_URI --to-version N
"""

import sys

from _entry import parser, run

from graphwright.ops import jobs

if __name__ == "__main__":
    p = parser(__doc__)
    p.add_argument("--to-version", type=int, required=True)
    a = p.parse_args()
    sys.exit(run(lambda: jobs.rollback(a.index, a.to_version)))
