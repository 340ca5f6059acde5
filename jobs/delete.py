"""Delete documents (by id or source key, or by source-key glob) and everything only they
supported, then publish.

    ray job submit --working-dir . -- python jobs/delete.py --index DIR_OR_URI --doc-id ID [--doc-id ID ...] [--source-glob GLOB ...]
"""

import sys

from _entry import parser, run

from graphwright.ops import jobs

if __name__ == "__main__":
    p = parser(__doc__, waits=True)
    p.add_argument("--doc-id", action="append", default=[])
    p.add_argument("--source-glob", action="append", default=[])
    a = p.parse_args()
    if not a.doc_id and not a.source_glob:
        p.error("name the documents to delete with --doc-id or --source-glob")
    sys.exit(run(lambda: jobs.delete(a.index, a.doc_id, a.source_glob), a.waiting_exit_code))
