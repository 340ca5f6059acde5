"""moto's S3 server, serving one request at a time. Its conditional puts check the key and then
write it without a lock, so on its threaded server two racing creates can both succeed (4 of 150
six-way races did here under load); S3 itself decides them atomically, and the lease tests race
takers on purpose. Run as `python tests/_moto_serial.py -H HOST -p PORT`."""

import sys

import moto.server

_run_simple = moto.server.run_simple


def _one_at_a_time(*args, **kwargs):
    kwargs["threaded"] = False
    return _run_simple(*args, **kwargs)


if __name__ == "__main__":
    moto.server.run_simple = _one_at_a_time
    sys.exit(moto.server.main(sys.argv[1:]))
